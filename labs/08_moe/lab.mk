# Lab 08's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means). apps/ep_sync.c: the experts' gradients averaged
# over their expert-data-parallel groups.
objects := expert_parallel
programs := train_moe
link.train_moe := train_moe ep_sync tp_layers 08_moe 04_tensor_parallel 00_single_device 09_checkpoint? 11_mixed_precision? 05_activation_memory?
fake_gpu := train_moe
