# Lab 07's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means). apps/cp_layers.c: ring attention and Ulysses as the
# model calls them.
objects := ring_attention ulysses
programs := train_cp check_ring_attention
link.check_ring_attention := check_ring_attention 07_context_parallel 00_single_device
link.train_cp := train_cp cp_layers ddp_sync tp_layers 07_context_parallel 04_tensor_parallel \
	02_ddp 00_single_device 09_checkpoint? 11_mixed_precision? 05_activation_memory?
checks := 2:check_ring_attention; 3:check_ring_attention; 4:check_ring_attention
fake_gpu := train_cp
