"""A PyTorch DistributedDataParallel training on the CPU over Gloo, printing its step times.

    python -m testbed job --hosts h1,h2,h5,h6 -- {python} examples/ddp_train.py --steps 50
    python -m workloads.command --local 2 -- {python} examples/ddp_train.py --steps 5 --hidden 64

A plain torch.distributed program (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the launcher, as
torchrun gives them). The model is an MLP classifier on data the script generates (seeded: a fixed
random teacher labels Gaussian inputs), each rank on its own shard; DDP all-reduces the gradients
(--hidden sets their size: 4·(in·h + h·h + h·classes) bytes) every step. A step's time runs from
its forward pass to the end of the optimiser step, so it holds the gradient all-reduce. Each step
is printed and, with $STARNET_METRICS set, appended there as {"step", "step_s", "loss"}; the testbed
summarises step_s (p50, p99) as the job's figures. --slow-rank R --slow-s S makes rank R sleep S
seconds in every step: a straggler for the localiser to find. --report-steps sends each step's time
and own work (the step less its backward pass, which holds DDP's all-reduce) to the testbed's
controller with the helper workloads/command/steps.py, the evidence `diagnose` names a slow host
by. The last line says whether the loss fell.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

INPUTS, CLASSES = 64, 10


def shard(rank: int, samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A rank's inputs and labels: Gaussian inputs, labelled by a teacher all ranks share."""
    teacher = torch.Generator().manual_seed(seed)
    weights = torch.randn(INPUTS, CLASSES, generator=teacher)
    mine = torch.Generator().manual_seed(seed * 1000 + rank + 1)
    x = torch.randn(samples, INPUTS, generator=mine)
    return x, (x @ weights).argmax(dim=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    parser.add_argument("--hidden", type=int, default=256, help="hidden width (the gradients' size)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank sleeps --slow-s in every step")
    parser.add_argument("--slow-s", type=float, default=0.0)
    parser.add_argument("--timeout-s", type=float, default=120.0, help="Gloo's timeout for one operation")
    parser.add_argument("--report-steps", action="store_true",
                        help="report step timings to the testbed's controller (workloads.command.steps)")
    args = parser.parse_args()
    if args.steps < 2 or args.batch < 1 or args.hidden < 1:
        raise SystemExit("--steps must be >= 2, --batch and --hidden >= 1")
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(INPUTS, args.hidden), nn.ReLU(),
                                                  nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                                                  nn.Linear(args.hidden, CLASSES)))
    grad_bytes = 4 * sum(p.numel() for p in model.parameters())
    optimiser = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    x, y = shard(rank, args.batch * 16, args.seed)
    metrics = os.environ.get("STARNET_METRICS")
    losses, times = [], []
    steps = None
    if args.report_steps:
        from workloads.command.steps import StepReporter

        steps = StepReporter()
    step_timer = steps.step if steps else contextlib.nullcontext
    waiting = steps.waiting if steps else contextlib.nullcontext
    if rank == 0:
        print(f"# DDP over Gloo: {world} ranks, {grad_bytes} B of gradients per step, batch {args.batch} per rank")
    for step in range(args.steps):
        lo = (step * args.batch) % len(x)
        xb, yb = x[lo:lo + args.batch], y[lo:lo + args.batch]
        t0 = time.monotonic()
        with step_timer():
            loss = nn.functional.cross_entropy(model(xb), yb)
            optimiser.zero_grad()
            with waiting():
                loss.backward()  # DDP all-reduces the gradients here
            if rank == args.slow_rank:
                time.sleep(args.slow_s)
            optimiser.step()
        step_s = time.monotonic() - t0
        losses.append(loss.item())
        times.append(step_s)
        print(f"step {step} loss {loss.item():.4f} time {step_s * 1e3:.1f} ms", flush=True)
        if metrics:
            with open(metrics, "a") as f:
                f.write(json.dumps({"step": step, "step_s": step_s, "loss": loss.item()}) + "\n")
    head, tail = sum(losses[:3]) / 3 if len(losses) >= 3 else losses[0], losses[-1]
    ordered = sorted(times[1:])
    verdict = "fell" if tail < head else "DID NOT FALL"
    print(f"# rank {rank}: step time p50 {ordered[len(ordered) // 2] * 1e3:.1f} ms, "
          f"max {ordered[-1] * 1e3:.1f} ms; loss {head:.3f} -> {tail:.3f} ({verdict})")
    if steps:
        steps.close()
    dist.barrier()  # every rank is done: nothing more goes over Gloo
    # End here, without destroy_process_group or the interpreter's exit: PyTorch 2.13's Gloo aborts in
    # about 1 of 10 teardowns ("terminate called without an active exception", SIGABRT) after every
    # rank has finished, which would turn a finished job into a failed one. The output is flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if tail < head else 1)


if __name__ == "__main__":
    sys.exit(main())
