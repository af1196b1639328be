"""A PyTorch Lightning callback: profile a few training steps after warm-up and write the
gpuprof report beside the run's logs::

    from gpuprof.lightning import GpuprofCallback

    trainer = lightning.pytorch.Trainer(callbacks=[GpuprofCallback()])
    trainer.fit(model)
    # -> <trainer.log_dir>/gpuprof/rank<k>.pt.trace.json.gz, report.gpuprof.json, report.html

After ``wait`` batches (5) and ``warmup`` batches (2) it records ``active`` batches (3);
under DDP, rank 0 analyzes every rank's trace together and prints the text report. See
:mod:`gpuprof.integrations.stepprofiler` for the details. Needs the ``lightning`` extra
(``pip install 'gpuprof[lightning]'``); built on ``lightning.pytorch`` when installed, else
on the standalone ``pytorch_lightning`` package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuprof.integrations.stepprofiler import ProfilingCallback

try:
    from lightning.pytorch import Callback
except ImportError:
    try:  # the standalone package of Lightning 1.x / 2.x
        from pytorch_lightning import Callback  # type: ignore[no-redef,assignment]
    except ImportError:
        raise ImportError("gpuprof.lightning needs PyTorch Lightning: pip install 'gpuprof[lightning]'") from None

__all__ = ["GpuprofCallback"]


class GpuprofCallback(ProfilingCallback, Callback):  # type: ignore[misc]
    """Profile ``active`` training batches after ``wait`` + ``warmup`` and report on them.

    ``dirpath``: where traces and reports go (default ``<trainer.log_dir>/gpuprof``).
    ``print_report``: print the text report on rank 0. ``record_shapes``: record tensor
    shapes (gives communication sizes and bandwidth). ``with_stack``: Python stacks.
    After training, ``report`` is the :class:`gpuprof.Report` (rank 0) and ``report_path``
    the saved JSON report.
    """

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._start(Path(trainer.log_dir or trainer.default_root_dir) / "gpuprof")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._stop()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._stop(failed=True)
