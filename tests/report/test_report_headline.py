"""The headline is true for any spec (issue 27): mCE and relative mCE only over ImageNet-C's whole protocol
(15 corruptions x severities 1-5), otherwise the mean of the k corruptions and a note saying why; ObjectCompose
families grouped by what they are (natural scenes, synthetic colour and texture backgrounds, controls,
attacks); a folder made by ``generate`` evaluated back is labelled with the shift and severity it was made
under, not clean."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shiftbench.metrics.robustness import IMAGENET_C_CORRUPTIONS, mean_corruption_error
from shiftbench.report.headline import headline, imagenet_c_coverage
from shiftbench.report.tables import build_tables
from shiftbench.results.records import Row


def _row(model, shift, value, params=None, severity=5, metric="top1"):
    return Row(model=model, dataset="d", shift=shift, params=params or {}, severity=severity, metric=metric,
               value=value, n=50, extra={})


def _head(rows):
    return headline(rows, build_tables(rows, ["top1"]), ["top1"])


def _texts(head) -> list[str]:
    """Every label of the headline a reader sees (groups, heads, their hover texts, cell texts)."""
    out = [g for g, _ in head.groups] + [c.head for c in head.columns] + [c.title for c in head.columns]
    return out + [cell.text for r in head.rows for cell in r.cells]


def three_corruptions(models=("a", "b")):
    rows = []
    for m in models:
        rows.append(_row(m, "clean", 0.8, severity=0))
        rows += [_row(m, c, 0.5 - 0.05 * s, severity=s) for c in ("gaussian_noise", "fog", "snow") for s in (3, 5)]
    return rows


def test_three_corruptions_show_their_mean_and_never_the_name_mce():
    head = _head(three_corruptions())
    heads = [c.head for c in head.columns]
    assert heads == ["top1 (%)", "mean of 3 corruptions"]
    assert head.groups == [("clean", 1), ("corruptions", 1)]  # not "ImageNet-C": three of its corruptions
    assert not any("mCE" in t for t in _texts(head))
    assert ("No mCE or relative mCE: they are defined over all 15 ImageNet-C corruptions at severities 1-5 (top-1, "
            "the corruptions' own parameters); this run has 3 of 15 at severities 3, 5, so the headline shows their "
            "mean (mean of 3 corruptions).") in head.note
    assert head.rows[0].cells[1].text == "30.0 (-50.0)"


def full_protocol(models=("a", "b")):
    rows = []
    for k, m in enumerate(models):
        rows.append(_row(m, "clean", 0.8, severity=0))
        rows += [_row(m, c, 0.7 - 0.1 * s - 0.01 * k, severity=s) for c in IMAGENET_C_CORRUPTIONS for s in range(1, 6)]
    return rows


def test_the_whole_protocol_gets_mce_and_relative_mce():
    rows = full_protocol()
    head = _head(rows)
    assert [c.head for c in head.columns] == ["top1 (%)", "mean of 15 corruptions", "mCE", "rel. mCE"]
    assert head.groups == [("clean", 1), ("ImageNet-C", 3)]
    assert "No mCE" not in head.note
    errors = {c: [1 - (0.7 - 0.1 * s) for s in range(1, 6)] for c in IMAGENET_C_CORRUPTIONS}
    assert head.rows[0].cells[2].text == f"{100 * mean_corruption_error(errors):.1f}"
    assert imagenet_c_coverage(rows).full


def test_cbar_is_a_column_of_its_own_beside_the_whole_imagenet_c_protocol():
    """C-bar's ten never enter ImageNet-C's mean or its mCE (which stay over the 15), nor "other shifts"."""
    from shiftbench.shifts.cbar import CBAR_CORRUPTIONS

    rows = full_protocol()
    for m in ("a", "b"):
        rows += [_row(m, c, 0.6 - 0.05 * s, severity=s) for c in CBAR_CORRUPTIONS for s in range(1, 6)]
    head = _head(rows)
    assert [c.head for c in head.columns] == ["top1 (%)", "mean of 15 corruptions", "mCE", "rel. mCE",
                                                    "mean of 10 C-bar corruptions"]
    assert head.groups == [("clean", 1), ("ImageNet-C", 3), ("ImageNet-C-bar", 1)]
    alone = _head(full_protocol()).rows[0].cells
    assert [c.text for c in head.rows[0].cells[:4]] == [c.text for c in alone]  # ImageNet-C's unchanged
    assert head.rows[0].cells[4].text == "45.0 (-35.0)"  # the mean of 0.6 - 0.05 s over s = 1..5


@pytest.mark.parametrize("cut", ["one condition of one model", "a severity", "a corruption", "params"])
def test_any_part_of_the_protocol_missing_means_no_mce(cut):
    rows = full_protocol()
    if cut == "one condition of one model":
        rows = [r for r in rows if not (r["model"] == "b" and r["shift"] == "fog" and r["severity"] == 2)]
    elif cut == "a severity":
        rows = [r for r in rows if r["severity"] != 1]
    elif cut == "a corruption":
        rows = [r for r in rows if r["shift"] != "jpeg_compression"]
    else:  # the corruption at other parameters than its own is not ImageNet-C's
        rows = [replace(r, params={"x": 1}) if r.shift == "snow" else r for r in rows]
    head = _head(rows)
    assert not imagenet_c_coverage(rows).full
    assert not any("mCE" in t for t in _texts(head)) and "No mCE or relative mCE" in head.note
    assert head.groups[1][0] == "corruptions"


def test_colour_and_texture_are_synthetic_backgrounds_not_natural_scenes():
    rows = []
    for m in ("a", "b"):
        rows += [_row(m, "clean", 0.9, severity=0), _row(m, "background_color", 0.6, {"color": "red"}),
                 _row(m, "background_texture", 0.5, {"texture": 3}),
                 _row(m, "background_scene", 0.8, {"scene": "mixed_same"}),
                 _row(m, "background_scene", 0.7, {"scene": "mixed_rand"}),
                 _row(m, "object_only", 0.85), _row(m, "adversarial_texture", 0.1)]
    head = _head(rows)
    assert head.groups == [("clean", 1), ("natural scenes", 3), ("synthetic backgrounds", 2), ("controls", 1),
                              ("attacks", 1)]
    assert [c.head for c in head.columns] == ["top1 (%)", "mixed_same", "mixed_rand", "BG-Gap", "color",
                                                    "texture", "object_only", "adversarial"]
    assert not any("natural" in g for g in ("synthetic backgrounds",))
    only = _head([r for r in rows if r["shift"] in ("clean", "background_texture")])
    assert only.groups == [("clean", 1), ("synthetic backgrounds", 1)]  # one texture: not "backgrounds (natural)"


# ---- a folder made by generate, evaluated back ----

def test_a_generated_folder_is_reported_under_its_shift_and_severity(tmp_path):
    import csv
    import io

    import shiftbench as sb
    import tiny_registry  # noqa: F401
    from shiftbench.engine.generate import generate
    from shiftbench.report import build_report, run_headline

    generate("_test_tiny", ["_test_noise"], [3], tmp_path / "gen", seed=4)
    folder = tmp_path / "gen" / "_test_noise" / "3"
    spec = {"name": "read back", "dataset": str(folder), "metrics": ["top1"],
            "models": [{"name": "dummy_classifier", "params": {"label_space": ["class0", "class1"]}}],
            "shifts": ["clean", {"name": "_test_noise", "severities": [2]}], "batch_size": 8, "seed": 0}
    sb.evaluate(spec, store=tmp_path / "r.db")
    from shiftbench.results.store import Store

    with Store(tmp_path / "r.db", create=False) as db:
        identity = db.run(None)["identity"]
    origin = identity["dataset"]["generated"]
    assert (origin["shift"], origin["severity"], origin["seed"], origin["complete"]) == ("_test_noise", 3, 4, True)
    build_report(tmp_path / "r.db", tmp_path / "out")
    label = "_test_noise s3 (generated)"
    md = (tmp_path / "out" / "tables.md").read_text()
    assert f"| {label} |" in md and "| clean |" not in md
    conditions = {r[1] for r in csv.reader(io.StringIO((tmp_path / "out" / "tables.csv").read_text()))}
    assert label in conditions and "clean" not in conditions
    head = run_headline(tmp_path / "r.db")
    assert head.groups[0][0] == label and head.columns[0].group == label
    assert head.note.startswith("The data of this run is a folder written by shiftbench generate under "
                                "_test_noise at severity 3 (seed 4, from _test_tiny)")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "made by shiftbench generate" in html and label in html
    # the same images copied elsewhere (no generate settings above them) are an ordinary folder: clean
    import shutil

    shutil.copytree(folder, tmp_path / "plain")
    sb.evaluate(dict(spec, dataset=str(tmp_path / "plain"), name="plain"), store=tmp_path / "p.db")
    with Store(tmp_path / "p.db", create=False) as db:
        assert "generated" not in db.run(None)["identity"]["dataset"]
    assert run_headline(tmp_path / "p.db").groups[0][0] == "clean"


@pytest.mark.parametrize("module", ["shiftbench.report.headline", "shiftbench.report.objectcompose",
                                    "shiftbench.report.pascal_ea", "shiftbench.metrics.uncertainty"])
def test_module_doctests(module):
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(module)).failed == 0
