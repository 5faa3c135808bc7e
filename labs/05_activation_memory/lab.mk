# Lab 05's manifest (the Makefile reads it; labs/00_single_device/lab.mk says
# what each line means). train_tp and train_zero are built again from
# apps/train_tp.c and apps/train_zero.c with WITH_LAB05 (apps/NAME_lab05.o:
# --sp, --recompute through apps/act_layers.c); check_act checks the
# layernorm sum alone, on a pipeline's stages.
objects := activation_memory
programs := train_tp train_zero check_act
link.train_tp := train_tp_lab05 act_layers ddp_sync tp_layers 05_activation_memory \
	04_tensor_parallel 02_ddp 00_single_device 09_checkpoint? 11_mixed_precision?
link.train_zero := train_zero_lab05 zero_scaled act_layers 05_activation_memory 03_zero 00_single_device \
	09_checkpoint? 11_mixed_precision?
link.check_act := check_act 05_activation_memory
checks := 2:check_act
fake_gpu := train_tp train_zero
# The extension, fused attention's CPU forward pass, plugs into every
# trainer (apps/fused_attention_ops.c hands it to the kernels); a program
# lists 05_activation_memory?, and where this lab is not available
# apps/no_fused_attention.c stands in: --attention fused is refused there.
plugin := fused_attention_ops
absent := no_fused_attention
