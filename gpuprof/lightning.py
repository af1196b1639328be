"""A PyTorch Lightning callback: profile a few training steps after warm-up and write the
gpuprof report beside the run's logs::

    from gpuprof.lightning import GpuprofCallback

    trainer = lightning.pytorch.Trainer(callbacks=[GpuprofCallback()])
    trainer.fit(model)
    # -> <trainer.log_dir>/gpuprof/rank<k>.pt.trace.json.gz, report.gpuprof.json, report.html

After ``wait`` batches (5) and ``warmup`` batches (2) it records ``active`` batches (3);
under DDP, rank 0 analyzes every rank's trace together and prints the text report. See
:mod:`gpuprof.stepprofiler` for the details. Needs the ``lightning`` extra
(``pip install 'gpuprof[lightning]'``); built on ``lightning.pytorch`` when installed, else
on the standalone ``pytorch_lightning`` package.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TextIO

from gpuprof.model.report import Report
from gpuprof.stepprofiler import DEFAULT_ACTIVE, DEFAULT_WAIT, DEFAULT_WARMUP, StepProfiler, _check_steps

try:
    from lightning.pytorch import Callback
except ImportError:
    try:  # the standalone package of Lightning 1.x / 2.x
        from pytorch_lightning import Callback  # type: ignore[no-redef,assignment]
    except ImportError:
        raise ImportError("gpuprof.lightning needs PyTorch Lightning: pip install 'gpuprof[lightning]'") from None

__all__ = ["GpuprofCallback"]


class GpuprofCallback(Callback):  # type: ignore[misc]
    """Profile ``active`` training batches after ``wait`` + ``warmup`` and report on them.

    ``dirpath``: where traces and reports go (default ``<trainer.log_dir>/gpuprof``).
    ``print_report``: print the text report on rank 0. ``record_shapes``: record tensor
    shapes (gives communication sizes and bandwidth). ``with_stack``: Python stacks.
    After training, ``report`` is the :class:`gpuprof.Report` (rank 0) and ``report_path``
    the saved JSON report.
    """

    def __init__(
        self,
        wait: int = DEFAULT_WAIT,
        warmup: int = DEFAULT_WARMUP,
        active: int = DEFAULT_ACTIVE,
        dirpath: str | os.PathLike[str] | None = None,
        *,
        print_report: bool = True,
        file: TextIO | None = None,
        record_shapes: bool = True,
        with_stack: bool = False,
    ) -> None:
        super().__init__()
        _check_steps(wait, warmup, active)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.dirpath = dirpath
        self.print_report = print_report
        self.file = file
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.profiler: StepProfiler | None = None

    @property
    def report(self) -> Report | None:
        return self.profiler.report if self.profiler else None

    @property
    def report_path(self) -> Path | None:
        return self.profiler.report_path if self.profiler else None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        out = Path(self.dirpath) if self.dirpath else Path(trainer.log_dir or trainer.default_root_dir) / "gpuprof"
        self.profiler = StepProfiler(
            out, self.wait, self.warmup, self.active, print_report=self.print_report, file=self.file,
            record_shapes=self.record_shapes, with_stack=self.with_stack,
        )
        self.profiler.start()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.profiler is not None:
            self.profiler.step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.profiler is not None:
            self.profiler.stop()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.profiler is not None:
            self.profiler.stop(failed=True)
