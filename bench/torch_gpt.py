#!/usr/bin/python3
"""torch_gpt: training throughput of the kit's GPT in PyTorch eager, for
comparison with train_gpt (bench/bench.sh runs both).

Usage: /usr/bin/python3 bench/torch_gpt.py [--config small|tiny] [--steps N] [--threads N]

The model is tests/torch_gpt_model.py, the same one tests/torch_check.py
checks against the C model, so both sides do the same arithmetic. Each step is
zero_grad, forward, backward and an AdamW step on random tokens; 3 warm-up
steps are not timed. Prints torch_tokens_per_s (B*T over the median step time)
and torch_step_ms (the median).

Thread pools: Debian's torch runs its own loops on libgomp's threads and its
GEMMs on OpenBLAS's separate pthread pool. With libgomp's default active
waiting, the idle OpenMP threads spin on the cores the BLAS threads need, and
2 threads run at about half the speed of 1. So unless the environment says
otherwise we set OMP_WAIT_POLICY=PASSIVE and OPENBLAS_NUM_THREADS=--threads
before torch loads: the fastest setting we measured, for a fair comparison.
"""
import argparse
import os
import statistics
import sys
import time

WARMUP_STEPS = 3
CONFIG_NAMES = ("small", "tiny")   # keys of torch_gpt_model.CONFIGS


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a positive integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expects a positive integer, got '{text}'")
    return value


def main():
    ap = argparse.ArgumentParser(description="PyTorch eager training throughput of the kit's GPT")
    ap.add_argument("--config", choices=CONFIG_NAMES, default="small")
    ap.add_argument("--steps", type=positive_int, default=20, help="timed steps (default 20)")
    ap.add_argument("--threads", type=positive_int, default=os.cpu_count() or 1,
                    help="intra-op threads (default: all cores)")
    args = ap.parse_args()

    # read when the libraries load, so before `import torch` (see the docstring)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    import torch
    sys.dont_write_bytecode = True   # no __pycache__ in the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from torch_gpt_model import CONFIGS, GPT
    assert set(CONFIGS) == set(CONFIG_NAMES), "CONFIG_NAMES is out of date"

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    c = CONFIGS[args.config]
    B, T, V = c["batch"], c["seq"], c["vocab_size"]
    model = GPT(c["vocab_size"], c["ctx_len"], c["n_layer"], c["n_head"], c["n_embd"])
    # AdamW as train_gpt runs it: decay on every parameter, its default betas and eps
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)
    print(f"torch_gpt: torch {torch.__version__}, config {args.config} "
          f"({model.num_params()} parameters), batch {B} x {T}, {args.threads} thread"
          f"{'s' if args.threads != 1 else ''} (OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}), "
          f"{WARMUP_STEPS} warm-up + {args.steps} timed steps", flush=True)

    times = []
    for step in range(WARMUP_STEPS + args.steps):
        tokens = torch.randint(0, V, (B, T + 1), generator=gen)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(inputs, targets)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if not torch.isfinite(loss):
            print(f"torch_gpt: error: loss is {loss.item()} at step {step}", file=sys.stderr)
            return 1
        if step >= WARMUP_STEPS:
            times.append(dt)

    median = statistics.median(times)
    print(f"torch_tokens_per_s={B * T / median:.1f}")
    print(f"torch_step_ms={median * 1e3:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
