"""docs/stability.md stays true: its tables quote benchmarks/results/stability.json (rounded as printed), the
normalisers it lists are the ones the code uses, and the spec it shows is configs/imagenet_p.yaml."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from shiftbench.metrics.stability import ALEXNET_FP, ALEXNET_T5D
from shiftbench.shifts.perturbations import IMAGENET_P

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "stability.md").read_text()
RESULT = json.loads((ROOT / "benchmarks" / "results" / "stability.json").read_text())


def _ci(cell: dict, scale: float = 1.0, digits: int = 1) -> str:
    return f"{scale * cell['value']:.{digits}f} [{scale * cell['low']:.{digits}f}, {scale * cell['high']:.{digits}f}]"


def test_the_summary_and_per_perturbation_tables_are_the_benchmarks() -> None:
    assert len(RESULT["models"]) == 3
    for m in RESULT["models"]:
        line = (f"| {m['model']} | {100 * m['clean_top1']:.1f} | {_ci(m['mfr'])} | {_ci(m['mt5d'])} | "
                f"{m['mfr']['n']} |")
        assert line in DOC, line
        assert m["covered"] == list(IMAGENET_P)
        per = {p["shift"]: p for p in m["perturbations"] if p["difficulty"] == 1 and not p["params"]}
        row = f"| {m['model']} | " + " | ".join(_ci(per[s]["fp"], 100.0) for s in IMAGENET_P) + " |"
        assert row in DOC, row
    assert RESULT["largest_row_vs_per_sequence_mean"] < 1e-12


def test_the_listed_normalisers_are_the_codes() -> None:
    fp = [f"{ALEXNET_FP[s]:.2f}" for s in IMAGENET_P]
    assert re.search(r"FP \(%\) gaussian noise " + re.escape(fp[0]), DOC)
    text = " ".join(DOC.split())
    for value in fp + [f"{ALEXNET_T5D[s]:.2f}" for s in IMAGENET_P]:
        assert value in text, value


def test_the_spec_shown_is_the_config() -> None:
    shown = re.search(r"```text\n(name: imagenet-p.*?)```", DOC, flags=re.S).group(1)
    assert yaml.safe_load(shown) == yaml.safe_load((ROOT / "configs" / "imagenet_p.yaml").read_text())
