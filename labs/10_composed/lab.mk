# Lab 10's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means). train_4d runs every earlier lab's functions through
# the lab's seams; apps/composed_zero1.c is ZeRO-1 as the loop's states.
# check_mesh_order checks the mesh's order alone.
objects := composed
programs := train_4d check_mesh_order
link.train_4d := train_4d composed_zero1 zero_scaled act_layers cp_layers ddp_sync ep_sync tp_layers \
	10_composed 05_activation_memory 06_pipeline 07_context_parallel 08_moe 04_tensor_parallel \
	03_zero 02_ddp 00_single_device 09_checkpoint? 11_mixed_precision?
link.check_mesh_order := check_mesh_order 10_composed 03_zero
checks := check_mesh_order
fake_gpu := train_4d
