"""Pascal-EA end to end: the spec loads, the runner evaluates a segmenter under attribute shifts and
computes the spec's quality section, the report builds the Table-1-style changes and the quality table from
the store alone (structured blocks for the HTML, Markdown/CSV exports)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.report.pascal_ea import blocks_markdown, pascal_blocks, quality_table, table1, write_pascal_ea
from shiftbench.spec import load_spec

from tiny_hub import PixelFeatures, register_pixel_features

ROOT = Path(__file__).resolve().parents[2]


def test_config_lists_every_attribute_of_the_paper():
    spec = load_spec(ROOT / "configs" / "pascal_ea.yaml")
    values = {(s.name, tuple(sorted(s.params.values()))) for s in spec.shifts if s.name != "clean"}
    assert len(values) == 12
    assert all(s.severities == (1, 3, 5) for s in spec.shifts if s.name != "clean")
    assert [m.name for m in spec.models] == ["u2netp"] and spec.metrics == ["foreground_iou"]


def _rows():
    rows = [{"model": m, "shift": "clean", "params": {}, "severity": 0, "metric": "miou", "value": v, "n": 8}
            for m, v in (("a", 0.8), ("b", 0.6))]
    for sev, scale in ((1, 0.5), (5, 1.0)):
        rows += [{"model": "a", "shift": "attribute_material", "params": {"material": "paper"}, "severity": sev,
                  "metric": "miou", "value": 0.8 - 0.3 * scale, "n": 8},
                 {"model": "a", "shift": "attribute_style", "params": {"style": "sketch"}, "severity": sev,
                  "metric": "miou", "value": 0.8 - 0.5 * scale, "n": 8},
                 {"model": "b", "shift": "attribute_style", "params": {"style": "sketch"}, "severity": sev,
                  "metric": "miou", "value": 0.6 - 0.1 * scale, "n": 7}]
    return rows


def _all_twelve(rows, model="a", value=0.75):
    """``rows`` with every attribute edit of the paper at severity 5 for ``model`` (those it lacks)."""
    from shiftbench.report import pascal_ea as pe

    have = {(r["model"], pe.attribute_value(r["shift"], r["params"])) for r in rows if r["severity"] == 5}
    out = list(rows)
    for family, v in pe.ATTRIBUTE_COLUMNS:
        if (model, v) not in have:
            out.append({"model": model, "shift": f"attribute_{family}", "params": {family: v}, "severity": 5,
                        "metric": "miou", "value": value, "n": 8})
    return out


def _texts(block):
    return [[c if isinstance(c, str) else c["text"] for c in row] for row in block["rows"]]


def _visible(blocks):
    """Every string a reader sees (text, list items, table heads and cells, cell titles)."""
    out = []
    for b in blocks:
        out += [b.get("text", "")] + list(b.get("items", [])) + list(b.get("head", []))
        for row in b.get("rows", []):
            out += [c if isinstance(c, str) else c["text"] + " " + c.get("title", "") for c in row]
    return out


def test_table1_drops_and_overall():
    t = table1(_rows())
    assert t["severity"] == 5 and t["columns"] == ["paper", "sketch"]
    assert t["cells"]["a"]["paper"] == pytest.approx(-30.0) and t["cells"]["a"]["sketch"] == pytest.approx(-50.0)
    assert t["overall"]["a"] == pytest.approx(-40.0) and t["overall"]["b"] == pytest.approx(-10.0)
    assert t["cells"]["b"]["paper"] is None
    assert table1(_rows(), severity=1)["overall"]["a"] == pytest.approx(-20.0)
    assert t["n"]["a"]["paper"] == 8 and t["n"]["b"]["sketch"] == 7 and t["n"]["b"]["paper"] is None
    with pytest.raises(ShiftbenchError, match="no attribute"):
        table1([r for r in _rows() if r["shift"] == "clean"])


def test_blocks_one_sign_convention_n_per_cell_and_no_markdown():
    blocks = pascal_blocks(_rows())
    tables = [b for b in blocks if b["kind"] == "table"]
    headings = [b["text"] for b in blocks if b["kind"] == "heading"]
    # one table per severity, highest first, each titled with the sign convention
    assert [h for h in headings if "severity" in h] == ["miou change against clean (shifted − clean, points), severity 5",
                                                        "miou change against clean (shifted − clean, points), severity 1"]
    assert tables[0]["head"] == ["model", "clean miou", "paper (material)", "sketch (style)", "mean change"]
    # two of the paper's 12 edits: no paper row, and one line says why
    assert _texts(tables[0]) == [["a", "80.0", "-30.0", "-50.0", "-40.0"], ["b", "60.0", "–", "-10.0", "-10.0"]]
    assert ("No comparison with Pascal-EA Table 1 (mIoU change, mean of 11 segmentation models): it has 2 of the "
            "paper's 12 attribute edits (missing violet, pink,") in " ".join(_visible(blocks))
    assert _texts(tables[1])[0] == ["a", "80.0", "-15.0", "-25.0", "-20.0"]
    b_sketch = tables[0]["rows"][1][3]
    assert b_sketch["title"].startswith("n = 7") and "50.0 under sketch, 60.0 clean" in b_sketch["title"]
    assert tables[0]["rows"][0][-1]["cls"] == "mean"
    assert not any("**" in v or "`" in v for v in _visible(blocks))
    assert blocks_markdown(blocks).count("| a | 80.0 | -30.0 | -50.0 | -40.0 |") == 1


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
    assert t["family_means"]["color"] == {"lpips": pytest.approx(0.3), "fid": 3.0}  # pink has no fid: mean of violet's
    blocks = pascal_blocks(_rows(), q)
    table = [b for b in blocks if b["kind"] == "table"][-1]
    assert _texts(table) == [["color", "violet", "0.200", "3.00"], ["color", "pink", "0.400", "–"],
                             ["color", "mean", "0.300", "3.00"]]
    assert all(c["cls"] == "mean" for c in table["rows"][-1]) and table["rows"][0][2]["title"] == "n = 4"
    assert not any("**" in v or "`" in v for v in _visible(blocks))
    path = write_pascal_ea(tmp_path, _rows(), q)
    text = path.read_text()
    assert "| **color** | **mean** | **0.300** | **3.00** |" in text  # bold only in the Markdown export
    assert text.count("Image quality of the edits") == 1 and "change against clean" in text
    with open(tmp_path / "pascal_ea_table1.csv", newline="") as fh:
        table1_rows = list(csv.DictReader(fh))
    a5 = next(r for r in table1_rows if r["model"] == "a" and r["severity"] == "5")
    assert float(a5["paper_change"]) == pytest.approx(-30.0) and a5["paper_n"] == "8" and a5["violet_change"] == ""
    assert (tmp_path / "pascal_ea_quality.csv").read_text().splitlines()[1] == "color,violet,4,0.2,3.0"


def test_runner_and_report_end_to_end(tmp_path):
    """A real run: dummy segmenter on `objects` under two attribute edits, then the report from the store."""
    from shiftbench.report import build_report
    from shiftbench.results.store import Store

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
    assert "foreground_iou change against clean" in text and "pink (color)" in text and "sketch (style)" in text
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


def test_the_former_command_names_its_replacement(capsys):
    from shiftbench.report.pascal_ea import main

    assert main(["--config", "x.yaml"]) == 2
    out = capsys.readouterr().out
    assert "shiftbench evaluate" in out and "shiftbench report" in out and len(out.strip().splitlines()) == 1


def test_report_of_a_run_with_quality_reads_the_store_only(tmp_path, monkeypatch):
    """evaluate computes the spec's quality section and stores it; building the report afterwards creates
    no model and runs no feature network or evaluation (each entry point raises), and shows the stored numbers."""
    import html as htmllib
    import re

    import shiftbench.engine.evaluate as engine_evaluate
    import shiftbench.engine.quality as engine_quality
    import shiftbench.metrics.quality as quality
    from e2e import report_tables
    from shiftbench.registry import MODELS
    from shiftbench.results.artifacts import stored_quality_rows
    from shiftbench.results.store import Store

    spec = {"name": "pea_q", "dataset": "objects", "models": ["dummy_segmenter"], "metrics": ["foreground_iou"],
            "limit": 3, "shifts": ["clean", {"name": "attribute_pattern", "params": {"pattern": "striped"}, "severities": [5]}],
            "quality": {"metrics": ["lpips", "dino_distance", "fid"], "features": register_pixel_features()}}
    rows = sb.evaluate(spec, store=tmp_path / "s.db")
    db = Store(tmp_path / "s.db")
    qrows = stored_quality_rows(db, rows[0]["run_id"])
    db.close()
    assert {r["metric"] for r in qrows} == {"lpips", "dino_distance", "fid"} and all(r["n"] == 3 for r in qrows)

    def forbidden(*args, **kwargs):
        raise AssertionError("the report ran a model")

    for module, name in ((engine_quality, "evaluate_quality"), (quality, "create_feature_net"),
                         (engine_evaluate, "evaluate"), (sb, "evaluate"),
                         (PixelFeatures, "features")):
        monkeypatch.setattr(module, name, forbidden)
    monkeypatch.setattr(MODELS, "create", forbidden)
    tables, _, html = report_tables(tmp_path / "s.db", tmp_path / "rep")
    lpips = next(r["value"] for r in qrows if r["metric"] == "lpips")
    quality_table = next(t for t in tables if t[0][:3] == ["family", "attribute", "LPIPS ↓"])
    assert quality_table[1][:3] == ["pattern", "striped", f"{lpips:.3f}"] and quality_table[-1][:2] == ["pattern", "mean"]
    change = next(t for t in tables if t[0][:2] == ["model", "clean foreground_iou"])
    clean = next(r["value"] for r in rows if r["shift"] == "clean")
    striped = next(r["value"] for r in rows if r["shift"] != "clean")
    assert change[1][:3] == ["dummy_segmenter", f"{100 * clean:.1f}", f"{100 * (striped - clean):+.1f}"]
    assert 'title="n = 3' in html
    section = html[html.index("Pascal-EA: attribute edits"):]
    visible = htmllib.unescape(re.sub(r"<[^>]+>", " ", section))
    assert "**" not in visible and "`" not in visible
    assert (tmp_path / "rep" / "pascal_ea.md").exists() and (tmp_path / "rep" / "pascal_ea_quality.csv").exists()


# ---- the paper's Table 1 beside ours (issue 16 item 4) ----

def test_paper_row_equals_the_constants_and_our_rows_stay():
    from shiftbench.report import pascal_ea as pe
    from shiftbench.report.blocks import strings_of
    from markdown_parse import markdown_blocks

    rows = _rows()
    for value in ("violet", "wood", "dotted", "snowy"):  # one attribute of every family, model a only
        family = next(f for f, v in pe.ATTRIBUTE_COLUMNS if v == value)
        rows.append({"model": "a", "shift": f"attribute_{family}", "params": {family: value}, "severity": 5,
                     "metric": "miou", "value": 0.75, "n": 8})
    six = next(b for b in pascal_blocks(rows) if b["kind"] == "table")
    assert pe.PAPER_ROW not in [r[0] for r in _texts(six)]  # 6 of the 12 edits: not the paper's protocol
    assert "6 of the paper's 12 attribute edits" in pe.paper_protocol(table1(rows))[0]
    rows = _all_twelve(rows)  # the paper's whole attribute set, mIoU: its row comes
    assert pe.paper_protocol(table1(rows)) == []
    blocks = pascal_blocks(rows)
    table = next(b for b in blocks if b["kind"] == "table")
    columns = [h.split(" (")[0] for h in table["head"][2:-1]]
    assert columns == [v for _, v in pe.ATTRIBUTE_COLUMNS]
    paper = _texts(table)[-1]
    assert paper[0] == pe.PAPER_ROW and paper[2:-1] == [f"{pe.PAPER_TABLE1[c]:+.1f}" for c in columns]
    assert paper[-1] == f"{sum(pe.PAPER_TABLE1[c] for c in columns) / len(columns):+.1f}"
    t = table1(rows)
    assert _texts(table)[0][2:-1] == [f"{t['cells']['a'][c]:+.1f}" for c in columns]
    # the Markdown export parses back to the same table; no Markdown inside the blocks
    parsed = [b for b in markdown_blocks(blocks_markdown(blocks)) if b["kind"] == "table"]
    mine = [b for b in blocks if b["kind"] == "table"]
    assert [b["head"] for b in parsed] == [b["head"] for b in mine]
    assert [b["rows"] for b in parsed] == [_texts(b) for b in mine]
    assert not any("**" in v or "`" in v for v in strings_of(blocks))


def test_which_families_hurt_most_is_computed_for_ours_and_the_paper(monkeypatch):
    from shiftbench.report import pascal_ea as pe

    assert pe.family_drops(pe.PAPER_TABLE1)["material"] == pytest.approx((-19.7 - 19.5 - 18.7 - 31.2) / 4)
    assert pe.hurt_most(pe.PAPER_TABLE1) == (["style", "material"], True)
    # ours from _rows(): material -30 (a only), style mean of a's -50 and b's -10 = -30; only two families,
    # so no paper line (2 of its 12 edits)
    items = next(b for b in pascal_blocks(_rows()) if b["kind"] == "list")["items"]
    assert items == ["ours (mean of 2 models, miou): material (-30.0) and style (-30.0); "
                     "material and sketch hurt most: holds"]
    # every edit of the paper (a at -5 points on those _rows() lacks): the paper's line comes
    items = next(b for b in pascal_blocks(_all_twelve(_rows())) if b["kind"] == "list")["items"]
    assert items[1].endswith("style (-24.0) and material (-22.3); material and sketch hurt most: holds")
    # colour hurting more than material in ours: the verdict flips for ours only
    worse = _rows() + [{"model": m, "shift": "attribute_color", "params": {"color": "pink"}, "severity": 5,
                        "metric": "miou", "value": 0.1, "n": 8} for m in ("a", "b")]
    items = next(b for b in pascal_blocks(worse) if b["kind"] == "list")["items"]
    assert "color (-60.0) and material (-30.0)" in items[0] and items[0].endswith("does not hold")
    assert len(items) == 1  # 3 of the paper's 12 edits: ours alone
    # a different paper constant flips the paper's verdict: painting worse than sketch
    monkeypatch.setitem(pe.PAPER_TABLE1, "painting", -70.0)
    assert pe.hurt_most(pe.PAPER_TABLE1) == (["style", "material"], False)
    monkeypatch.setitem(pe.PAPER_TABLE1, "painting", -7.3)
    monkeypatch.setitem(pe.PAPER_TABLE1, "dotted", -90.0)
    items = next(b for b in pascal_blocks(_all_twelve(_rows())) if b["kind"] == "list")["items"]
    assert items[1].endswith("pattern (-49.0) and style (-24.0); material and sketch hurt most: does not hold")
    assert pe.hurt_most({"sketch": -5.0}) == (["style"], None)  # one family: n/a
