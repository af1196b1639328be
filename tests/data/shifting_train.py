"""A tiny CPU training job whose step time changes mid-run (it knows nothing about gpuprof).

A small MLP trained with SGD on synthetic batches served by a ``torch.utils.data.DataLoader``
(one batch per ``__getitem__``, in the training process). From step ``--change-at`` on:

* ``--slow-data-ms X``: every batch costs X ms more to load (a data shard that decodes slower);
* ``--slow-rank R --sleep-ms Y``: rank R sleeps Y ms before each forward pass (a rank that
  falls behind; under ``torchrun --nproc-per-node 2`` with ``--ddp``, the other rank waits
  for it in the gradient all-reduce).

``--step-ms Z`` makes every step cost at least Z ms of loading (so that steps are long enough
to follow on a busy machine). ``--ddp`` trains with DistributedDataParallel over gloo from
torchrun's environment. ``--hold-in-window K --hold-file F``: the K-th time a profiler is
recording, write F and wait there for good (a test's way to kill a run inside a window).
``--until-path P --max-steps M``: after ``--steps``, go on until P exists (at most M steps in
all), so that a test waits for what it needs (e.g. a window's request folder) however busy
the machine is, not for a number of steps. Prints ``done STEPS`` at the end (rank 0).
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset


class Batches(Dataset):
    def __init__(self, n: int, args: argparse.Namespace) -> None:
        self.n, self.args = n, args
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(16, 32, generator=g)
        self.y = torch.randn(16, 1, generator=g)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        step = i + 1
        ms = self.args.step_ms + (self.args.slow_data_ms if step >= self.args.change_at else 0.0)
        if ms > 0:
            time.sleep(ms / 1000.0)
        return self.x, self.y


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--change-at", type=int, default=10**9)
    p.add_argument("--slow-data-ms", type=float, default=0.0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--hold-in-window", type=int, default=0)
    p.add_argument("--hold-file", default="")
    p.add_argument("--until-path", default="")
    p.add_argument("--max-steps", type=int, default=0)
    args = p.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rank = 0
    model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(32, args.hidden), torch.nn.ReLU(),
                                                 torch.nn.Linear(args.hidden, 1))
    if args.ddp:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    until = Path(args.until_path) if args.until_path else None
    total = max(args.steps, args.max_steps) if until is not None else args.steps
    loader = DataLoader(Batches(total, args), batch_size=None, shuffle=False, num_workers=0)
    recording, windows = False, 0
    step = 0
    for i, (x, y) in enumerate(loader):
        step = i + 1
        if step > args.steps and (until is None or until.exists()):
            step -= 1
            break
        if args.hold_in_window:
            now = bool(torch._C._autograd._profiler_enabled())
            windows += now and not recording
            recording = now
            if now and windows == args.hold_in_window:
                with open(args.hold_file, "w") as fh:
                    fh.write(str(step))
                while True:
                    time.sleep(1.0)
        if rank == args.slow_rank and step >= args.change_at:
            time.sleep(args.sleep_ms / 1000.0)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    if args.ddp:
        import torch.distributed as dist

        dist.destroy_process_group()
    if rank == 0:
        print(f"done {step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
