"""The Lightning and Hugging Face callbacks, in real (tiny, CPU) training runs.

They run when the libraries are installed (``pip install -e '.[lightning,hf]'``) and skip
with the reason otherwise; the README's install has neither.
"""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest

import gpuprof
from gpuprof.model.schema import first_problem

torch = pytest.importorskip("torch", reason="needs torch (pip install torch==2.13.0, the CPU build)")
pytestmark = pytest.mark.torch

HAVE_LIGHTNING = importlib.util.find_spec("lightning") is not None
HAVE_HF = importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("accelerate") is not None


def _check_outputs(folder: Path, printed: str, recorded_steps: int) -> None:
    assert (folder / "rank0.pt.trace.json.gz").is_file()
    doc = json.loads((folder / "report.gpuprof.json").read_text())
    assert first_problem(doc) is None
    assert doc["inputs"] == [str(folder / "rank0.pt.trace.json.gz")]
    assert "<html" in (folder / "report.html").read_text().lower()
    assert "no GPU activity" in printed  # CPU-only: said so, no figures invented
    import gzip

    trace = json.loads(gzip.decompress((folder / "rank0.pt.trace.json.gz").read_bytes()))
    steps = {e["name"] for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert len(steps) == recorded_steps, sorted(steps)
    # The folder analyzes again as it is: the saved report is not taken for a trace.
    again = gpuprof.analyze(folder)
    assert [r.source for r in again.ranks] == [str(folder / "rank0.pt.trace.json.gz")]
    assert not [w for w in again.warnings if "skipped" in w]


@pytest.mark.skipif(not HAVE_LIGHTNING, reason="lightning not installed (pip install -e '.[lightning]')")
# A run that ends inside the window (4 batches: 2 waited, 1 warm-up, then 1 recorded and the
# open one ended by stop) still writes its shorter trace and report.
@pytest.mark.parametrize("max_steps, recorded", [(12, 3), (4, 2)])
def test_lightning_callback(tmp_path: Path, max_steps: int, recorded: int) -> None:
    import lightning.pytorch as pl

    from gpuprof.lightning import GpuprofCallback

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
    out = io.StringIO()
    callback = GpuprofCallback(wait=2, warmup=1, active=3, file=out)
    trainer = pl.Trainer(
        default_root_dir=tmp_path, max_steps=max_steps, accelerator="cpu", devices=1, callbacks=[callback],
        logger=pl.loggers.CSVLogger(tmp_path), enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, log_every_n_steps=1,
    )
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=8))
    folder = Path(trainer.log_dir) / "gpuprof"
    assert folder.parent == tmp_path / "lightning_logs" / "version_0"  # beside the run's metrics.csv
    assert callback.report_path == folder / "report.gpuprof.json" and callback.report is not None
    _check_outputs(folder, out.getvalue(), recorded)


@pytest.mark.skipif(not HAVE_HF, reason="transformers/accelerate not installed (pip install -e '.[hf]')")
def test_hf_trainer_callback(tmp_path: Path) -> None:
    from transformers import Trainer, TrainingArguments

    from gpuprof.hf import GpuprofCallback

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

    class Data(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
        def __init__(self) -> None:
            self.x, self.y = torch.randn(256, 16), torch.randn(256, 1)

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"x": self.x[i], "labels": self.y[i]}

    out = io.StringIO()
    callback = GpuprofCallback(wait=2, warmup=1, active=3, file=out)
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=10, per_device_train_batch_size=8, report_to=[],
        use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )
    Trainer(model=Tiny(), args=args, train_dataset=Data(), callbacks=[callback]).train()
    folder = tmp_path / "run" / "gpuprof"
    assert callback.report_path == folder / "report.gpuprof.json" and callback.report is not None
    _check_outputs(folder, out.getvalue(), 3)


def test_step_counts_are_checked() -> None:
    from gpuprof.integrations.stepprofiler import StepProfiler

    with pytest.raises(ValueError, match="active"):
        StepProfiler("x", active=0)
    with pytest.raises(ValueError, match="wait"):
        StepProfiler("x", wait=-1)


def test_a_second_profiler_is_not_started(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuprof.integrations.stepprofiler import StepProfiler

    sp = StepProfiler(tmp_path / "g", wait=0, warmup=0, active=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        sp.start()
        sp.step()
    sp.stop()
    assert "another torch profiler is active" in capsys.readouterr().err
    assert not (tmp_path / "g").exists() and sp.report is None


def test_ranks_meet_and_rank_0_reports_on_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks of one job, played in turn in this process (torch.distributed's rank and
    barrier stand-ins): each writes its trace, both meet at the barrier, rank 0 alone
    analyzes both traces together and prints."""
    import gpuprof.integrations.torch as gtorch
    from gpuprof.integrations import stepprofiler

    met: list[int] = []
    for rank in (1, 0):  # rank 1 finishes first: rank 0 must still see its trace
        monkeypatch.setattr(stepprofiler, "dist_rank_world", lambda r=rank: (r, 2))
        monkeypatch.setattr(gtorch, "dist_rank_world", lambda r=rank: (r, 2))
        monkeypatch.setattr(stepprofiler, "barrier", lambda r=rank: met.append(r))
        out = io.StringIO()
        sp = stepprofiler.StepProfiler(tmp_path, wait=1, warmup=1, active=2, file=out)
        sp.start()
        x = torch.randn(64, 64)
        for _ in range(6):
            (x @ x).sum()
            sp.step()
        sp.stop()
        assert (tmp_path / f"rank{rank}.pt.trace.json.gz").is_file()
        if rank == 1:
            assert sp.report is None and out.getvalue() == "" and not (tmp_path / "report.gpuprof.json").exists()
    assert met == [1, 0]
    assert sp.report is not None and "no GPU activity" in out.getvalue()
    doc = json.loads((tmp_path / "report.gpuprof.json").read_text())
    assert first_problem(doc) is None
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["inputs"] == [str(tmp_path / "rank0.pt.trace.json.gz"), str(tmp_path / "rank1.pt.trace.json.gz")]


def test_a_rank_trace_rank_0_cannot_see_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import gpuprof.integrations.torch as gtorch
    from gpuprof.integrations import stepprofiler

    monkeypatch.setattr(stepprofiler, "dist_rank_world", lambda: (0, 3))
    monkeypatch.setattr(gtorch, "dist_rank_world", lambda: (0, 3))
    monkeypatch.setattr(stepprofiler, "barrier", lambda: None)
    sp = stepprofiler.StepProfiler(tmp_path, wait=0, warmup=0, active=1, print_report=False)
    sp.start()
    (torch.randn(8, 8) @ torch.randn(8, 8)).sum()
    sp.step()
    err = capsys.readouterr().err
    assert "2 rank trace(s) not found" in err and "rank1.pt.trace.json.gz, rank2.pt.trace.json.gz" in err
    assert sp.report is not None and [r.rank for r in sp.report.ranks] == [0]
