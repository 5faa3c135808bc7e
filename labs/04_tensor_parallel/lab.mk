# Lab 04's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means). apps/tp_layers.c: the lab's layers as the model
# calls them; lab 02's DDP averages over the data-parallel groups.
objects := tensor_parallel
programs := train_tp
link.train_tp := train_tp ddp_sync tp_layers 04_tensor_parallel 02_ddp 00_single_device 09_checkpoint? 11_mixed_precision? 05_activation_memory?
fake_gpu := train_tp
