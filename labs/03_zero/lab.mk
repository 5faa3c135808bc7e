# Lab 03's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means)
objects := zero
programs := train_zero
link.train_zero := train_zero zero_scaled 03_zero 00_single_device 09_checkpoint? 11_mixed_precision? 05_activation_memory?
fake_gpu := train_zero
