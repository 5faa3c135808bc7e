# Lab 07's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means). apps/cp_layers.c: ring attention and Ulysses as the
# model calls them.
objects := ring_attention ulysses
programs := train_cp
link.train_cp := train_cp cp_layers ddp_sync tp_layers 07_context_parallel 04_tensor_parallel \
	02_ddp 00_single_device 09_checkpoint? 11_mixed_precision? 05_activation_memory?
fake_gpu := train_cp
