/* Lab 06: pipeline schedules. A pipeline cuts the model into stages over p
 * ranks and splits a step's batch into m micro-batches; a schedule says,
 * for each rank, in which order it runs the forward and backward passes of
 * its stages and sends and receives the activations and gradients between
 * them. The schedule decides how long the ranks sit idle (the bubble) and
 * how many micro-batches' activations each must hold at once.
 *
 * A schedule is data (common/schedule.h): each rank's list of ops, F, B
 * (or I and W), SA, RA, SG, RG, for a micro-batch on one of its chunks.
 * Build one with schedule_create(p, m, v) and schedule_add (compute ops
 * have peer -1); make consecutive messages one batch, posted and completed
 * together, with schedule_batch. Every generator below returns a new
 * schedule (the caller frees it with schedule_free) that must pass
 * schedule_validate: each (micro-batch, stage) forward and backward once,
 * each input received before it is used and each output sent after it is
 * made, every send meeting its receive, and no deadlock when every send
 * and receive blocks until its partner is there (rendezvous).
 *
 * Check your work:
 *   ./build/labs/06_pipeline/pipeline_schedule --schedule 1f1b -p 4 -m 8 --comm
 * prints each rank's list, the validator's verdict and the simulated
 * timeline (schedule_simulate): each rank's busy and idle time, its
 * bubble fraction and peak activations, and the bubble next to its
 * formula (pipe_bubble_fraction, pipe_bubble_fraction_zb_h1); with
 * --out DIR it also draws the timeline, DIR/gantt.png. make check LAB=06
 * runs every generator for p = 1..6, m = 1..12 against the formulas (in a
 * handout, make test does too once you have started the lab).
 *
 * Conventions (schedule.h): v = 1 except for the interleaved schedule, so
 * chunk 0 is rank r's one stage, stage r; with v chunks, chunk c of rank r
 * is stage r + c p. Micro-batches are numbered from 0 in the order they
 * enter the pipeline.
 */
#ifndef SCHEDULES_H
#define SCHEDULES_H

#include "schedule.h"

/* GPipe (Huang et al. 2019): every rank runs the forwards of all m
 * micro-batches, then their backwards, last micro-batch first. Holds m
 * micro-batches' activations on every rank; bubble (p - 1) / (m + p - 1). */
Schedule *schedule_gpipe(int p, int m);

/* 1F1B, as PipeDream-Flush and Megatron-LM's non-interleaved schedule
 * (Narayanan et al. 2021): each rank runs a warm-up of forwards, then
 * alternates one forward and one backward (the steady state), then runs
 * the backwards left (the cool-down). The warm-up is the shortest that
 * keeps every rank busy once micro-batch 0 reaches the last stage, and no
 * longer: rank r holds at most min(p - r, m) micro-batches' activations
 * (the checks compare each rank's peak), and the bubble is GPipe's. In
 * the steady state rank r sends a gradient to r - 1 while r - 1 sends it
 * an activation: those pairs must be batched (Megatron-LM's
 * send_forward_recv_backward and send_backward_recv_forward), or both wait
 * in a send forever. */
Schedule *schedule_1f1b(int p, int m);

/* Megatron-LM's interleaved 1F1B (Narayanan et al. 2021): rank r holds v
 * chunks, stages r, r + p, ..., r + (v - 1) p, so a micro-batch passes
 * every rank v times, each forward on stage s after stage s - 1's and each
 * backward after stage s + 1's. Micro-batches go through the chunks in
 * groups of p (README, "Interleaving"): needs v >= 2 and m a multiple of
 * p. Which micro-batch and chunk each rank's k-th forward and k-th
 * backward take is Megatron-LM's order, and the checks compare every
 * rank's compute ops with it, in order. As in 1F1B, a warm-up of forwards,
 * then one forward and one backward at a time, then the backwards left;
 * the warm-up is Megatron-LM's too, and each rank's peak of chunks'
 * activations in flight (more than 1F1B's) is checked against it. One
 * batch of messages after each round of compute (a warm-up or cool-down
 * op, or a steady-state forward-and-backward pair): what the round made,
 * sent, and what the next round needs, received. Bubble (p - 1) /
 * (v m + p - 1), in exchange for v times as many messages. */
Schedule *schedule_interleaved(int p, int m, int v);

/* ZB-H1 (Qi et al. 2023, Zero Bubble Pipeline Parallelism): 1F1B with each
 * backward split into I (PIPE_BACKWARD_INPUT: the gradient the previous
 * stage waits for) and W (PIPE_BACKWARD_WEIGHT: the weight gradients,
 * which nobody waits for). Rank r runs W of micro-batch i after I of
 * micro-batch i + r and that I's messages (a lone send and receive, not a
 * batch), and its last r W's at the end, after its last I: the
 * activations in flight stay 1F1B's min(p - r, m), and with
 * m >= p and equal costs the bubble is a third of 1F1B's
 * (pipe_bubble_fraction_zb_h1). */
Schedule *schedule_zb_h1(int p, int m);

/* The lab's extension (README.md): 1F1B with no batch at all, every
 * message a lone op, still valid under rendezvous: the order of the
 * steady state's messages, not a batch, keeps the neighbours from both
 * waiting in a send. The same compute order, bubble and memory as 1F1B. */
Schedule *schedule_1f1b_unbatched(int p, int m);

/* The second extension (README.md): DualPipe (DeepSeek-V3). p ranks (even),
 * m micro-batches (even, at least 2p), DualPipe's placement
 * (schedule_create_dual): rank r holds stages r (chunk 0) and p - 1 - r
 * (chunk 1); micro-batches 0 .. m/2 - 1 enter at rank 0, the rest at rank
 * p - 1. Each rank's compute ops in the order of DeepSeek's eight steps
 * (README, "DualPipe"); every message between two compute ops in one
 * batch, posted before the second. Bubble (p/2 - 1)(F&B + B - 3W)
 * (pipe_idle_dualpipe), for twice the parameters. */
Schedule *schedule_dualpipe(int p, int m);

/* "gpipe", "1f1b", "interleaved", "zb-h1", "1f1b-unbatched" or "dualpipe" for p ranks, m micro-batches
 * and v chunks per rank. Bad input (pipe_schedule_problem) is a user
 * error, one line naming the problem. */
Schedule *schedule_by_name(const char *name, int p, int m, int v);

#endif
