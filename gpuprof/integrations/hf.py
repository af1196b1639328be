"""A Hugging Face ``transformers`` ``TrainerCallback``: profile a few training steps after
warm-up and write the gpuprof report beside the run's outputs::

    from gpuprof.hf import GpuprofCallback

    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds, callbacks=[GpuprofCallback()])
    trainer.train()
    # -> <args.logging_dir or args.output_dir>/gpuprof/rank<k>.pt.trace.json.gz, report.gpuprof.json, report.html

After ``wait`` optimizer steps (5) and ``warmup`` steps (2) it records ``active`` steps
(3); in a distributed run, rank 0 analyzes every rank's trace together and prints the text
report. See :mod:`gpuprof.integrations.stepprofiler` for the details. Needs the ``hf`` extra
(``pip install 'gpuprof[hf]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("gpuprof.hf needs Hugging Face transformers: pip install 'gpuprof[hf]'") from None

from gpuprof.integrations.stepprofiler import ProfilingCallback

__all__ = ["GpuprofCallback"]


class GpuprofCallback(ProfilingCallback, TrainerCallback):  # type: ignore[misc]
    """Profile ``active`` optimizer steps after ``wait`` + ``warmup`` and report on them.

    ``dirpath``: where traces and reports go (default ``gpuprof/`` in the run's logging
    folder, else its output folder). ``print_report``: print the text report on rank 0.
    ``record_shapes``: record tensor shapes (gives communication sizes and bandwidth).
    ``with_stack``: Python stacks. After training, ``report`` is the
    :class:`gpuprof.Report` (rank 0) and ``report_path`` the saved JSON report.
    """

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start(Path(getattr(args, "logging_dir", None) or args.output_dir) / "gpuprof")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._stop()
