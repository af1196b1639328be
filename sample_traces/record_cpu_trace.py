"""Record ``cpu-training/``: a real PyTorch profiler trace of a small CPU training run.

Run from the repository root with a CPU build of torch::

    python sample_traces/record_cpu_trace.py

It trains a small MLP classifier on synthetic data for a few steps, with a DataLoader and
an optimizer as a real loop has, and profiles three steps with ``torch.profiler`` (CPU
activity only, since there is no GPU). The trace is written the way
``tensorboard_trace_handler`` names it, gzip-compressed, to
``sample_traces/cpu-training/worker0.pt.trace.json.gz``.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent / "cpu-training" / "worker0.pt.trace.json.gz"


def main() -> int:
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)  # keep the trace small and the run reproducible in shape
    features = torch.randn(512, 64)
    labels = (features[:, :8].sum(dim=1) > 0).long()
    loader = DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"

        def on_ready(prof: profile) -> None:
            prof.export_chrome_trace(str(raw))

        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
            on_trace_ready=on_ready,
        ) as prof:
            for step, (x, y) in enumerate(loader):
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                prof.step()
                if step >= 5:
                    break
        OUT.parent.mkdir(parents=True, exist_ok=True)
        with open(raw, "rb") as src, gzip.GzipFile(OUT, "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)
    print(f"wrote {OUT} ({OUT.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
