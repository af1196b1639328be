"""A Hugging Face ``transformers`` ``TrainerCallback``: profile a few training steps after
warm-up and write the gpuprof report beside the run's outputs::

    from gpuprof.hf import GpuprofCallback

    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds, callbacks=[GpuprofCallback()])
    trainer.train()
    # -> <args.logging_dir or args.output_dir>/gpuprof/rank<k>.pt.trace.json.gz, report.gpuprof.json, report.html

After ``wait`` optimizer steps (5) and ``warmup`` steps (2) it records ``active`` steps
(3); in a distributed run, rank 0 analyzes every rank's trace together and prints the text
report. See :mod:`gpuprof.stepprofiler` for the details. Needs the ``hf`` extra
(``pip install 'gpuprof[hf]'``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TextIO

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("gpuprof.hf needs Hugging Face transformers: pip install 'gpuprof[hf]'") from None

from gpuprof.model.report import Report
from gpuprof.stepprofiler import DEFAULT_ACTIVE, DEFAULT_WAIT, DEFAULT_WARMUP, StepProfiler, _check_steps

__all__ = ["GpuprofCallback"]


class GpuprofCallback(TrainerCallback):  # type: ignore[misc]
    """Profile ``active`` optimizer steps after ``wait`` + ``warmup`` and report on them.

    ``dirpath``: where traces and reports go (default ``gpuprof/`` in the run's logging
    folder, else its output folder). ``print_report``: print the text report on rank 0.
    ``record_shapes``: record tensor shapes (gives communication sizes and bandwidth).
    ``with_stack``: Python stacks. After training, ``report`` is the
    :class:`gpuprof.Report` (rank 0) and ``report_path`` the saved JSON report.
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

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        base = getattr(args, "logging_dir", None) or args.output_dir
        out = Path(self.dirpath) if self.dirpath else Path(base) / "gpuprof"
        self.profiler = StepProfiler(
            out, self.wait, self.warmup, self.active, print_report=self.print_report, file=self.file,
            record_shapes=self.record_shapes, with_stack=self.with_stack,
        )
        self.profiler.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiler is not None:
            self.profiler.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiler is not None:
            self.profiler.stop()
