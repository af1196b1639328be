"""The training job that ``benchmarks/gpu_check.py`` runs: a small transformer with planted causes.

A next-token language model (embedding, ``nn.TransformerEncoder``, linear head) trained with
AdamW on synthetic token sequences served by a ``torch.utils.data.DataLoader``. It knows
nothing about gpuprof. Two causes of lost GPU time are planted, each with its switch:

* ``--num-workers 0`` (default): every batch costs ``--work-ms`` of CPU time (a stand-in for
  decoding and augmentation, spent in the collate function) in the training process itself,
  while the GPU waits: *dataloader*. ``--num-workers 4`` moves that work into worker
  processes that prepare batches ahead.
* ``--item`` (default): ``loss.item()`` every step, a blocking device-to-host copy that stops
  the host from queueing the next step ahead of the GPU: *sync*. ``--no-item`` removes it.

``--slow-from STEP --slow-ms MS`` makes every batch from STEP on cost MS more: the step time
changes mid-run, for the check of windows that follow the run (issue 31).

``--size`` picks the model: ``gpu`` (about 90 M parameters, tens of milliseconds a step on one
H100/H200), ``small`` (about 15 M, for two ranks on one GPU) or ``cpu`` (tiny, for machines
without a GPU); ``auto`` is ``gpu`` or ``cpu`` after the device.
``--ddp`` trains with ``torch.distributed`` from torchrun's environment (``--backend nccl``
or ``gloo``); every rank uses GPU ``LOCAL_RANK`` modulo the visible GPUs, so two ranks can
share one GPU.

At the end rank 0 (every rank with ``--all-ranks-print``) prints one line
``gpu_check_train: {json}`` with its figures: ``steps``, ``device``, ``loop_s`` (first to last
step, synchronized), ``steady_step_ms`` (mean step from ``--steady-from`` on, after the
profiler window of ``gpuprof run``), ``first_step_s`` (from process start to the end of the
first step) and ``wall_s`` (process start to the end of training). Exits with ``--exit-code``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

T_START = time.perf_counter()

import torch  # (imported after T_START: importing torch is part of wall_s)
from torch import nn
from torch.utils.data import DataLoader, Dataset

SIZES = {
    # d_model, heads, layers, sequence length, batch, vocabulary
    "gpu": {"d_model": 1024, "heads": 16, "layers": 6, "seq": 512, "batch": 16, "vocab": 8192},
    # for two ranks sharing one GPU: gloo moves every gradient through host memory
    "small": {"d_model": 512, "heads": 8, "layers": 4, "seq": 256, "batch": 8, "vocab": 4096},
    "cpu": {"d_model": 64, "heads": 4, "layers": 2, "seq": 32, "batch": 8, "vocab": 512},
}


class Tokens(Dataset):
    """Deterministic synthetic token sequences (one more token than the model sees)."""

    def __init__(self, n: int, seq: int, vocab: int, seed: int) -> None:
        self.n, self.seq, self.vocab, self.seed = n, seq, vocab, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        return torch.randint(0, self.vocab, (self.seq + 1,), generator=g)


class Collate:
    """Stacks a batch after ``work_ms`` of busy CPU time (holding the GIL, like Python decoding)."""

    def __init__(self, work_ms: float, slow_from: int = 0, slow_ms: float = 0.0) -> None:
        self.work_s = work_ms / 1000.0
        self.slow_from, self.slow_s = slow_from, slow_ms / 1000.0
        self.calls = 0

    def __call__(self, items: list[torch.Tensor]) -> torch.Tensor:
        self.calls += 1  # one batch per step (in the training process, --num-workers 0)
        slow = self.slow_s if self.slow_from and self.calls >= self.slow_from else 0.0
        end = time.perf_counter() + self.work_s + slow
        while time.perf_counter() < end:
            pass
        return torch.stack(items)


class TinyLM(nn.Module):
    def __init__(self, d_model: int, heads: int, layers: int, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(tokens)))


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="auto (cuda when available), cuda or cpu")
    ap.add_argument("--size", default="auto", choices=("auto", *SIZES))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--item", action=argparse.BooleanOptionalAction, default=True,
                    help="call loss.item() every step (a host-device sync); --no-item removes it")
    ap.add_argument("--work-ms", type=float, default=20.0, help="CPU milliseconds each batch costs to prepare")
    ap.add_argument("--steady-from", type=int, default=20, help="first step of the steady-state rate")
    ap.add_argument("--slow-from", type=int, default=0,
                    help="from this step on, each batch costs --slow-ms more (the step time changes mid-run)")
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--ddp", action="store_true", help="torch.distributed from torchrun's environment")
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    ap.add_argument("--all-ranks-print", action="store_true")
    ap.add_argument("--exit-code", type=int, default=0)
    return ap.parse_args()


def main() -> int:
    args = parse()
    device_kind = args.device
    if device_kind == "auto":
        device_kind = "cuda" if torch.cuda.is_available() else "cpu"
    size = SIZES[args.size if args.size != "auto" else ("gpu" if device_kind == "cuda" else "cpu")]
    rank, world = 0, 1
    if args.ddp:
        import torch.distributed as dist

        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
    if device_kind == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # the tiny CPU model gains nothing from more, and shares the cores
    if args.ddp:
        dist.init_process_group(args.backend, device_id=device if args.backend == "nccl" else None)
    torch.manual_seed(0)
    model: nn.Module = TinyLM(size["d_model"], size["heads"], size["layers"], size["vocab"]).to(device)
    if args.ddp:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    data = Tokens(args.steps * size["batch"], size["seq"], size["vocab"], seed=rank)
    loader = DataLoader(data, batch_size=size["batch"], shuffle=False, num_workers=args.num_workers,
                        collate_fn=Collate(args.work_ms, args.slow_from, args.slow_ms), pin_memory=device.type == "cuda",
                        persistent_workers=args.num_workers > 0,
                        prefetch_factor=4 if args.num_workers > 0 else None)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    losses: list[float] = []
    last = None
    t_first = t_from = None
    step = 0
    t0 = time.perf_counter()
    for batch in loader:
        batch = batch.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        logits = model(batch[:, :-1])
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        last = loss.detach()
        if args.item:
            losses.append(loss.item())  # the planted sync: the host waits for the GPU here
        step += 1
        if step == 1:
            sync()
            t_first = time.perf_counter()
        if step == args.steady_from:
            sync()
            t_from = time.perf_counter()
        if step >= args.steps:
            break
    sync()
    t_end = time.perf_counter()
    final_loss = float(last.item()) if last is not None else None
    steady_ms = None
    if t_from is not None and step > args.steady_from:
        steady_ms = (t_end - t_from) / (step - args.steady_from) * 1000.0
    figures = {
        "rank": rank, "world_size": world, "device": str(device),
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__, "size": size, "steps": step, "num_workers": args.num_workers,
        "item": args.item, "work_ms": args.work_ms, "backend": args.backend if args.ddp else None,
        "loop_s": round(t_end - t0, 4), "steady_from": args.steady_from,
        "steady_step_ms": None if steady_ms is None else round(steady_ms, 4),
        "first_step_s": None if t_first is None else round(t_first - T_START, 4),
        "wall_s": round(t_end - T_START, 4), "final_loss": final_loss,
    }
    if rank == 0 or args.all_ranks_print:
        print("gpu_check_train: " + json.dumps(figures), flush=True)
    if args.ddp:
        dist.destroy_process_group()
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
