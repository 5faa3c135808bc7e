# Lab 09's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means). check_ckpt checks the lab's geometry over simulated
# layouts; the four trainers are the earlier labs' again, with this copy's
# checkpoints.
objects := checkpoint_shards
programs := check_ckpt train_gpt train_zero train_tp train_pp
link.check_ckpt := check_ckpt 09_checkpoint
checks := check_ckpt
link.train_gpt := train_gpt 09_checkpoint? 00_single_device 11_mixed_precision? 05_activation_memory?
link.train_zero := train_zero zero_scaled 09_checkpoint? 03_zero 00_single_device 11_mixed_precision? 05_activation_memory?
link.train_tp := train_tp ddp_sync tp_layers 09_checkpoint? 04_tensor_parallel 02_ddp 00_single_device 11_mixed_precision? 05_activation_memory?
link.train_pp := train_pp ddp_sync tp_layers 09_checkpoint? 06_pipeline 04_tensor_parallel 02_ddp \
	00_single_device 11_mixed_precision? 05_activation_memory?
# Checkpoints (--save, --resume) reach the library through apps/checkpoints.c,
# which hands the lab's functions over (common/checkpoint.h's CkptOps); a
# program of labs 00-08 lists 09_checkpoint?, and where this lab is not
# available (a handout without its solution) apps/no_checkpoints.c stands
# in: the program says checkpoints come with this lab.
plugin := checkpoints
absent := no_checkpoints
