# Lab 00's manifest (the Makefile reads it; docs/ARCHITECTURE.md, "Adding a lab").
# objects: the lab's sources (labs/ and solutions/ copies), without .c
objects := backprop
# programs: what `make` links for each copy of the lab, into build/COPY/NN_name/
programs := train_gpt gradcheck
# link.PROG: what PROG links, in order: apps/NAME.c objects, and labs: this
# lab's objects from the copy being built, an earlier lab's through
# build/earlier/ (its solution when here, else the student's), LAB? only
# when that lab is available (earlier, or its solution here), else its
# stand-in; LAB/NAME: one object of a lab
link.train_gpt := train_gpt 00_single_device 09_checkpoint? 11_mixed_precision? 05_activation_memory?
link.gradcheck := gradcheck 00_single_device 05_activation_memory?
# checks: `make check LAB=00`, the lab's own checks of the student's copy
# (build/labs/NN_name/; CHECK_COPY=solutions: the solution's): commands of
# this lab's programs, "NP:" before one that runs on NP ranks, ";" between
checks := gradcheck
# fake_gpu: the programs tests/fake_gpu.bats runs on a pretend GPU
fake_gpu := train_gpt
# plugin: the apps/ objects linked with the lab's wherever a program links
# them, which hand its functions to the library (apps/backward_kernels.c:
# the two backward passes, to the kernels); absent: what stands in for them
# where a LAB? word finds the lab unavailable (labs/09_checkpoint/lab.mk)
plugin := backward_kernels
