# Lab 06's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means). pipeline_schedule draws schedules alone (with
# tools/plot_pipeline.sh); train_pp runs them on lab 04's layers.
objects := schedules pipeline
programs := pipeline_schedule train_pp check_schedules
link.pipeline_schedule := pipeline_schedule 06_pipeline/schedules
link.check_schedules := check_schedules 06_pipeline/schedules
link.train_pp := train_pp ddp_sync tp_layers 06_pipeline 04_tensor_parallel 02_ddp \
	00_single_device 09_checkpoint? 11_mixed_precision? 05_activation_memory?
checks := check_schedules
fake_gpu := train_pp
