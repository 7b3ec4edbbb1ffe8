"""ObjectCompose summary: mean and worst condition per family, change against clean (shifted - clean), controls and
the attack in their own rows, the paper's ordering as a list; the bundled spec runs end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

import shiftbench as sb
from shiftbench.report.objectcompose import family_of, summarise, to_markdown
from shiftbench.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]


def _rows(values: dict[tuple[str, tuple], tuple[float, float]]) -> list[dict]:
    rows = []
    for (shift, params), per_model in values.items():
        for model, v in zip(("a", "b"), per_model):
            rows.append(dict(model=model, shift=shift, params=dict(params), severity=0 if shift == "clean" else 5,
                             metric="top1", value=v, n=10))
            rows.append(dict(model=model, shift=shift, params=dict(params), severity=0 if shift == "clean" else 5,
                             metric="ece", value=0.1, n=10))
    return rows


PAPERLIKE = {
    ("clean", ()): (0.98, 0.96),
    ("background_inpaint", (("prompt", "class_label"),)): (0.95, 0.93),
    ("background_inpaint", (("prompt", "caption"),)): (0.92, 0.90),
    ("background_color", (("color", "red"),)): (0.86, 0.84),
    ("background_color", (("color", "blue"),)): (0.82, 0.80),
    ("background_texture", (("texture", 1),)): (0.85, 0.79),
    ("background_texture", (("texture", 4),)): (0.80, 0.84),
    ("adversarial_texture", ()): (0.20, 0.25),
    ("object_only", ()): (0.7, 0.6),
}


def test_worst_condition_per_family_and_change():
    s = summarise(_rows(PAPERLIKE))
    assert s["clean"] == pytest.approx(0.97)
    color = s["families"]["color"]
    assert color["worst"] == "background_color (color=blue) s5" and color["value"] == pytest.approx(0.81)
    assert color["change"] == pytest.approx(0.81 - 0.97)  # shifted - clean: a loss is negative
    assert color["mean"] == pytest.approx((0.85 + 0.81) / 2) and color["mean_change"] == pytest.approx(0.83 - 0.97)
    assert "drop" not in color and all("drop" not in pm for pm in color["per_model"].values())
    # worst of the model mean (texture 4: 0.82 vs texture 1: 0.82) - ties keep the first; per model it differs
    tex = s["families"]["texture"]
    assert tex["per_model"]["a"]["worst"] == "background_texture (texture=4) s5"
    assert tex["per_model"]["b"]["worst"] == "background_texture (texture=1) s5"
    assert tex["per_model"]["b"]["change"] == pytest.approx(0.79 - 0.96)
    assert tex["per_model"]["b"]["mean_change"] == pytest.approx((0.79 + 0.84) / 2 - 0.96)
    assert list(s["families"])[:2] == ["class_label", "caption"]
    assert s["holds"] is True and all(s["ordering"].values())
    md = to_markdown(s)
    assert "| color | background | 2 | 83.0 | -14.0 | background_color (color=blue) s5 | 81.0 | -16.0 |" in md
    assert "- color ~ texture: holds" in md and "the ordering holds" in md
    assert [s["families"][f]["role"] for f in ("adversarial", "object_only")] == ["attack", "control"]


def test_ordering_failures_and_missing_families():
    broken = dict(PAPERLIKE)
    broken[("adversarial_texture", ())] = (0.78, 0.78)  # not far below colour / texture
    broken[("background_inpaint", (("prompt", "caption"),))] = (0.97, 0.95)  # caption above class label
    s = summarise(_rows(broken))
    assert s["ordering"]["color, texture >> adversarial"] is False
    assert s["ordering"]["class_label >= caption"] is False
    assert s["holds"] is False and "does not hold" in to_markdown(s)
    only = summarise(_rows({k: v for k, v in PAPERLIKE.items() if k[0] in ("clean", "background_color")}))
    assert only["holds"] is None and only["ordering"]["color ~ texture"] is None
    assert family_of("background_inpaint", {"prompt": "texture3"}) == "texture"
    assert family_of("background_inpaint", {"prompt": "a cat on the moon"}) == "custom"
    assert family_of("gaussian_noise", {}) is None


def test_bundled_spec_is_valid():
    spec = load_spec(ROOT / "configs" / "objectcompose.yaml")
    names = [s.name for s in spec.shifts]
    assert names.count("background_color") == 4 and names.count("background_texture") == 4
    assert {"clean", "adversarial_texture", "object_only", "background_only", "background_scene"} <= set(names)
    assert [m.name for m in spec.models] == ["efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2"]


def test_protocol_runs_end_to_end_and_the_report_has_the_summary(tmp_path):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        spec = {"dataset": "objects", "dataset_params": {"scenes_per_object": 1}, "limit": 2,
                "models": ["efficientnet_lite0"], "metrics": ["top1", "ece"], "seed": 0,
                "shifts": ["clean", {"name": "background_color", "severity": 5, "params": {"color": "blue"}},
                           {"name": "adversarial_texture", "severity": 1}, "background_only"]}
        rows = sb.evaluate(spec, store=tmp_path / "oc.db")
    finally:
        torch.set_num_threads(before)
    shifts = {r["shift"] for r in rows}
    assert {"clean", "background_color", "adversarial_texture", "background_only"} <= shifts
    assert {r["metric"] for r in rows} >= {"top1", "ece"}
    from shiftbench.report import build_report

    build_report(tmp_path / "oc.db", tmp_path / "report")
    md = (tmp_path / "report" / "objectcompose.md").read_text()
    assert "| color |" in md and "| adversarial |" in md and "| background_only |" in md
