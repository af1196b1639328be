"""The colours of the report's charts: one per kind of time, and the text that reads on each."""

from __future__ import annotations

from collections.abc import Mapping

from gpuprof.model.causes import REGISTRY
from gpuprof.model.report import CAUSES

# One colour per kind of time for charts (compute first, then each cause's, from its
# declaration in gpuprof.model.causes): the Okabe-Ito palette, chosen to stay apart for the
# common colour-vision deficiencies (compute blue and straggler vermillion stay far apart
# under deuteranopia and protanopia; tests/render/test_render_palette.py checks every pair), plus a
# light grey for time no rule explains.
CAUSE_COLORS: Mapping[str, str] = {"compute": "#0072B2"} | {c.value: REGISTRY[c].color for c in CAUSES}


def text_color_on(background: str) -> str:
    """Black or white, whichever reads better on ``background`` (``#rrggbb``)."""
    r, g, b = (int(background[i : i + 2], 16) for i in (1, 3, 5))
    return "#000000" if (0.299 * r + 0.587 * g + 0.114 * b) > 140 else "#ffffff"
