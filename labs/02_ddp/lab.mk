# Lab 02's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means). apps/ddp_sync.c: the lab's averaging as the loop's
# GradSync.
objects := ddp
programs := train_ddp
link.train_ddp := train_ddp ddp_sync 02_ddp 00_single_device 09_checkpoint? 11_mixed_precision? 05_activation_memory?
fake_gpu := train_ddp
