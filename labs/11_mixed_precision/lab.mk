# Lab 11's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means). check_precision grades the conversions on all 2^32
# fp32 patterns; the three trainers are the earlier labs' again, with this
# copy's mixed precision.
objects := mixed_precision
programs := check_precision train_gpt train_ddp train_tp
link.check_precision := check_precision 11_mixed_precision
checks := check_precision
link.train_gpt := train_gpt 11_mixed_precision 00_single_device 09_checkpoint? 05_activation_memory?
link.train_ddp := train_ddp ddp_sync 11_mixed_precision 02_ddp 00_single_device 09_checkpoint? 05_activation_memory?
link.train_tp := train_tp ddp_sync tp_layers 11_mixed_precision 04_tensor_parallel 02_ddp \
	00_single_device 09_checkpoint? 05_activation_memory?
# Every trainer's --precision bf16|fp16 reaches the library through
# apps/mixed_precision_ops.c, which hands the lab's overflow check and
# master-weight step over (model_states.h's MixedPrecisionOps); a program
# lists 11_mixed_precision?, and where this lab is not available
# apps/no_mixed_precision.c stands in: the program trains fp32 only and
# says where mixed precision comes from.
plugin := mixed_precision_ops
absent := no_mixed_precision
