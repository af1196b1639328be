"""The chart colours stay apart for readers with the common colour-vision deficiencies.

Colours are simulated for deuteranopia and protanopia (Machado, Oliveira and Fernandes
2009, severity 1.0, on linear RGB) and compared in CIELAB: a distance under ~10 is hard to
tell apart in a thin chart segment.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpuprof.render.palette import CAUSE_COLORS, text_color_on

DEUTERANOPIA = np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]])
PROTANOPIA = np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]])
SRGB_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
WHITE = np.array([0.95047, 1.0, 1.08883])


def _linear(hex_color: str) -> np.ndarray:
    c = np.array([int(hex_color[i : i + 2], 16) / 255.0 for i in (1, 3, 5)])
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _lab(linear_rgb: np.ndarray) -> np.ndarray:
    xyz = SRGB_TO_XYZ @ np.clip(linear_rgb, 0.0, 1.0) / WHITE
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _distance(a: str, b: str, vision: np.ndarray) -> float:
    return float(np.linalg.norm(_lab(vision @ _linear(a)) - _lab(vision @ _linear(b))))


VISIONS = {"typical": np.eye(3), "deuteranopia": DEUTERANOPIA, "protanopia": PROTANOPIA}


@pytest.mark.parametrize("vision", VISIONS)
def test_compute_and_straggler_are_far_apart(vision: str) -> None:
    assert _distance(CAUSE_COLORS["compute"], CAUSE_COLORS["straggler"], VISIONS[vision]) > 60


@pytest.mark.parametrize("vision", VISIONS)
def test_every_pair_of_kinds_can_be_told_apart(vision: str) -> None:
    for a, b in itertools.combinations(CAUSE_COLORS, 2):
        assert _distance(CAUSE_COLORS[a], CAUSE_COLORS[b], VISIONS[vision]) > 12, (a, b)


def test_the_detector_would_notice_a_red_green_pair() -> None:
    # Classic red and green collapse under deuteranopia: the check above would fail on them.
    assert _distance("#2e7d32", "#c62828", np.eye(3)) > 40
    assert _distance("#4caf50", "#e57373", DEUTERANOPIA) < _distance("#4caf50", "#e57373", np.eye(3)) / 2


def test_label_text_is_readable_on_every_colour() -> None:
    assert text_color_on(CAUSE_COLORS["dataloader"]) == "#000000"  # yellow
    assert text_color_on(CAUSE_COLORS["compute"]) == "#ffffff"  # blue
    assert text_color_on(CAUSE_COLORS["host"]) == "#ffffff"  # black
