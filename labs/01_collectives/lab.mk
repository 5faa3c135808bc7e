# Lab 01's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means)
objects := collectives
programs := check_collectives bench_collectives
link.check_collectives := check_collectives 01_collectives
link.bench_collectives := bench_collectives 01_collectives
checks := 3:check_collectives; 4:check_collectives
fake_gpu := bench_collectives
