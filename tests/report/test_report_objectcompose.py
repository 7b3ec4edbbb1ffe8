"""ObjectCompose summary: mean and worst condition per family, change against clean (shifted - clean), controls and
the attack in their own rows, the paper's ordering as a list; the bundled spec runs end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from markdown_parse import markdown_blocks
import shiftbench as sb
from shiftbench.report.blocks import blocks_to_markdown, cell_text, strings_of
from shiftbench.report.objectcompose import family_of, summarise, summary_blocks, to_markdown
from shiftbench.results.records import Row
from shiftbench.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]


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
# the paper's protocol (with curated=True): every family of its Table 1, four colour and four texture prompts;
# the prompts added here are above each family's worst, so the worst values stay PAPERLIKE's
PAPERFULL = {**PAPERLIKE,
             ("background_color", (("color", "green"),)): (0.90, 0.88),
             ("background_color", (("color", "colorful"),)): (0.87, 0.85),
             ("background_texture", (("texture", 2),)): (0.90, 0.90),
             ("background_texture", (("texture", 3),)): (0.88, 0.88)}


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
    assert ("| color | synthetic background | 2 | 83.0 | -14.0 | background_color (color=blue) s5 | 81.0 | -16.0 |"
            in md)
    assert "- color ~ texture: ours holds\n" in md and "paper holds" not in md  # not the paper's protocol
    md = to_markdown(summarise(_rows(PAPERFULL), curated=True))
    assert "- color ~ texture: ours holds, paper holds" in md and "ours: the ordering holds" in md
    assert [s["families"][f]["role"] for f in ("adversarial", "object_only")] == ["attack", "control"]


def test_ordering_failures_and_missing_families():
    broken = dict(PAPERLIKE)
    broken[("adversarial_texture", ())] = (0.78, 0.78)  # not far below colour / texture
    broken[("background_inpaint", (("prompt", "caption"),))] = (0.97, 0.95)  # caption above class label
    s = summarise(_rows(broken))
    assert s["ordering"]["color, texture >> adversarial"] is False
    assert s["ordering"]["class_label >= caption"] is False
    assert s["holds"] is False and "ours: the ordering does not hold" in to_markdown(s)
    assert s["paper"]["holds"] is True  # the paper's verdict does not move with ours
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
        spec = {"dataset": "objects", "dataset_params": {"scenes_per_object": 1}, "limit": 6,
                "models": ["efficientnet_lite0"], "metrics": ["top1", "ece"], "seed": 0,
                "shifts": ["clean", {"name": "background_color", "severity": 5, "params": {"color": "blue"}},
                           {"name": "adversarial_texture", "severity": 1}, "background_only",
                           {"name": "object_only", "severity": 5}]}
        rows = sb.evaluate(spec, store=tmp_path / "oc.db")
    finally:
        torch.set_num_threads(before)
    shifts = {r["shift"] for r in rows}
    assert {"clean", "background_color", "adversarial_texture", "background_only"} <= shifts
    assert {r["metric"] for r in rows} >= {"top1", "ece"}
    from shiftbench.report import build_report
    from shiftbench.report.build import _summaries

    build_report(tmp_path / "oc.db", tmp_path / "report")
    md = (tmp_path / "report" / "objectcompose.md").read_text()
    assert "| color | synthetic background |" in md and "| adversarial | attack |" in md
    # one colour, no texture, not curated: not the paper's protocol, and one line says so
    assert "Ours vs the paper" not in md and "paper holds" not in md
    assert ("No comparison with ObjectCompose Table 1 (ImageNet-B_1000, mean of 7 classifiers): the run is not "
            "curated") in md
    assert "| background_only | control |" in md and "| object_only | control |" in md
    top1 = {r["shift"]: r["value"] for r in rows if r["metric"] == "top1"}
    assert top1["background_only"] < top1["clean"]  # a plain inpainted field: the object is gone
    saved = json.loads((tmp_path / "report" / "objectcompose.json").read_text())
    for family, e in saved["families"].items():
        assert "drop" not in e and e["change"] == pytest.approx(e["value"] - saved["clean"])
    assert saved["families"]["background_only"]["change"] < 0  # the sign: shifted - clean

    (tmp_path / "again").mkdir()
    summary = next(s for s in _summaries(tmp_path / "again", [Row(**r) for r in rows], "", []) if s["title"] == "ObjectCompose summary")
    assert summary["id"] == "objectcompose" and summary["blocks"] == summary_blocks(rows)
    for s in strings_of(summary["blocks"]):
        assert "**" not in s and "`" not in s, s
    ordering = [b for b in summary["blocks"] if b["kind"] == "list"]
    assert len(ordering) == 1 and ordering[0]["items"][-1].startswith("color, texture >> adversarial: ours ")
    table = next(b for b in summary["blocks"] if b["kind"] == "table")
    by_family = {cell_text(r[0]): r for r in table["rows"]}
    change = 100 * (top1["background_only"] - top1["clean"])
    assert cell_text(by_family["background_only"][4]) == f"{change:+.1f}" and change < 0
    assert by_family["background_only"][4]["cls"] == "down" and "n = 6 images" in by_family["background_only"][4]["title"]
    assert cell_text(by_family["object_only"][1]) == "control"
    # one model: the family table is already per model, so no per-model table repeats it; and no "ours vs the
    # paper" (not curated, one colour): the summary's tables are the family table alone
    assert [b["kind"] for b in summary["blocks"]].count("table") == 1
    # the same rows under the paper's protocol (told curated) get the side-by-side table second
    side = [b for b in summary_blocks(rows, curated=True) if b["kind"] == "table"]
    assert len(side) == 1  # still one colour, no texture: no comparison, curated or not
    missing = {("background_color", "color", c) for c in ("red", "green", "colorful")} | {
        ("background_texture", "texture", t) for t in (1, 2, 3, 4)} | {("background_scene", "scene", "mixed_same")}
    full = rows + [dict(r, shift=sh, params={k: v}) for sh, k, v in missing for r in rows
                   if r["shift"] == "background_color"]
    side = [b for b in summary_blocks(full, curated=True) if b["kind"] == "table"][1]
    assert side["head"][:3] == ["family", "our worst condition", "ours top1"]
    by_row = {cell_text(r[0]): [cell_text(c) for c in r] for r in side["rows"]}
    # one model, the attack's own source: its rows are all white-box, none transfer
    assert by_row["adversarial white-box"][2] == f"{100 * top1['adversarial_texture']:.1f}"
    assert by_row["adversarial transfer"][1:4] == ["–", "–", "–"]
    # the Markdown export parses back to the same cells
    parsed = [b for b in markdown_blocks(blocks_to_markdown(summary["blocks"])) if b["kind"] == "table"]
    mine = [b for b in summary["blocks"] if b["kind"] == "table"]
    assert [[[c for c in r] for r in b["rows"]] for b in parsed] == [[[cell_text(c) for c in r] for r in b["rows"]]
                                                                     for b in mine]


def test_controls_and_attack_never_enter_a_background_mean():
    s = summarise(_rows(PAPERLIKE))
    roles = {f: e["role"] for f, e in s["families"].items()}
    assert roles == {"class_label": "natural scene", "caption": "natural scene", "color": "synthetic background",
                     "texture": "synthetic background", "adversarial": "attack", "object_only": "control"}
    # each family's mean is over its own conditions only
    assert s["families"]["texture"]["mean"] == pytest.approx((0.82 + 0.82) / 2)
    assert s["families"]["adversarial"]["conditions"] == ["adversarial_texture s5"]
    blocks = summary_blocks(_rows(PAPERLIKE), curated=True)
    text = " ".join(strings_of(blocks))
    assert "the paper's Table 1" in text and "headline" in text  # which aggregate is which, said once
    assert not any("object_only" in item or "background_only" in item
                   for b in blocks if b["kind"] == "list" for item in b["items"])


def test_a_background_that_lowers_accuracy_has_a_negative_change():
    rows = _rows({("clean", ()): (0.9, 0.8), ("background_color", (("color", "red"),)): (0.5, 0.6)})
    s = summarise(rows)
    color = s["families"]["color"]
    assert color["change"] == pytest.approx(0.55 - 0.85) and color["change"] < 0
    assert color["per_model"]["a"]["change"] == pytest.approx(-0.4)
    table = next(b for b in summary_blocks(rows) if b["kind"] == "table")
    assert table["head"][4] == "mean change against clean" and cell_text(table["rows"][0][4]) == "-30.0"
    per_model = [b for b in summary_blocks(rows) if b["kind"] == "table"][1]  # no "ours vs the paper": one colour
    assert per_model["head"] == ["family", "role", "a", "b"]
    assert [cell_text(c) for c in per_model["rows"][0]] == ["color", "synthetic background", "50.0 (-40.0)",
                                                            "60.0 (-20.0)"]


# ---- the paper's Table 1 beside ours (issue 16 item 4) ----

def _side(blocks: list[dict]) -> dict[str, list[str]]:
    i = next(i for i, b in enumerate(blocks) if b["kind"] == "heading" and b["text"] == "Ours vs the paper")
    table = next(b for b in blocks[i:] if b["kind"] == "table")
    return {cell_text(r[0]): [cell_text(c) for c in r] for r in table["rows"]}


def test_side_by_side_values_equal_the_constants_and_our_rows():
    from shiftbench.report import objectcompose as oc

    rows = _rows(PAPERFULL)
    s = summarise(rows, curated=True)
    side = _side(summary_blocks(rows, curated=True))
    for key, paper_key in (("clean", "clean"), ("class_label", "class_label"), ("caption", "caption"),
                           ("color", "color"), ("texture", "texture"), ("adversarial (all models)", "adversarial")):
        assert side[key][4] == f"{oc.PAPER_TABLE1[paper_key]:.2f}"
        if key != "clean":
            assert side[key][5] == f"{oc.PAPER_TABLE1[paper_key] - oc.PAPER_TABLE1['clean']:+.2f}"
            assert s["paper"]["families"][paper_key]["value"] == pytest.approx(oc.PAPER_TABLE1[paper_key] / 100)
    # ours: the worst condition of the model mean and its change, from the rows themselves
    assert side["color"][1:4] == ["background_color (color=blue) s5", "81.0", "-16.0"]
    assert side["clean"][2] == "97.0" and side["clean"][6] == "10"
    assert side["adversarial (all models)"][2:4] == ["22.5", "-74.5"]
    assert "scene" not in side  # neither we nor the paper have it here
    assert side["adversarial white-box"][4:6] == ["–", "–"]  # the paper reports only the mean over 7
    # the export round-trips to the same cells
    blocks = summary_blocks(rows, curated=True)
    parsed = [b for b in markdown_blocks(blocks_to_markdown(blocks)) if b["kind"] == "table"]
    mine = [b for b in blocks if b["kind"] == "table"]
    assert [b["head"] for b in parsed] == [b["head"] for b in mine]
    assert [b["rows"] for b in parsed] == [[[cell_text(c) for c in r] for r in b["rows"]] for b in mine]
    for text in strings_of(blocks):
        assert "**" not in text and "`" not in text and not text.startswith("#"), text


def test_both_verdicts_are_computed_by_the_same_rule(monkeypatch):
    from shiftbench.report import objectcompose as oc

    s = summarise(_rows(PAPERFULL), curated=True)
    assert s["paper"]["ordering"] == oc._ordering({k: v / 100 for k, v in oc.PAPER_TABLE1.items() if k != "clean"})
    assert s["paper"]["holds"] is True and all(s["paper"]["ordering"].values())
    items = next(b for b in summary_blocks(_rows(PAPERFULL), curated=True) if b["kind"] == "list")["items"]
    assert "class_label >= caption: ours holds, paper holds" in items
    # a different paper constant flips the paper's verdict, and only it
    monkeypatch.setitem(oc.PAPER_TABLE1, "caption", 96.0)
    monkeypatch.setitem(oc.PAPER_TABLE1, "adversarial", 70.0)
    s = summarise(_rows(PAPERFULL), curated=True)
    assert s["paper"]["ordering"]["class_label >= caption"] is False
    assert s["paper"]["ordering"]["color, texture >> adversarial"] is False
    assert s["paper"]["holds"] is False and s["holds"] is True
    blocks = summary_blocks(_rows(PAPERFULL), curated=True)
    items = next(b for b in blocks if b["kind"] == "list")["items"]
    assert "class_label >= caption: ours holds, paper does not hold" in items
    assert _side(blocks)["caption"][4:6] == ["96.00", "-1.71"]
    assert "the paper's Table 1: the ordering does not hold" in " ".join(strings_of(blocks))


def test_adversarial_split_by_the_attacks_source_model():
    from shiftbench.report.objectcompose import attack_source

    assert attack_source("adversarial_texture", {}) == "efficientnet_lite0"
    assert attack_source("adversarial_texture", {"model": "b"}) == "b"
    assert attack_source("adversarial_diffusion", {"model": "sd-inpaint", "classifier": "a"}) == "a"
    assert attack_source("background_color", {"color": "red"}) is None
    values = {("clean", ()): (0.9, 0.8),
              ("adversarial_texture", (("model", "a"),)): (0.1, 0.7),  # white-box for a, transfer for b
              ("adversarial_diffusion", (("classifier", "b"), ("prompt", "class_label"))): (0.6, 0.2)}
    s = summarise(_rows(values))
    wb, tr = s["adversarial_whitebox"], s["adversarial_transfer"]
    assert wb["models"] == ["a", "b"] and tr["models"] == ["a", "b"]
    assert wb["mean"] == pytest.approx((0.1 + 0.2) / 2) and tr["mean"] == pytest.approx((0.7 + 0.6) / 2)
    assert wb["worst"] == "adversarial_texture (model=a) s5" and wb["value"] == pytest.approx(0.1)
    assert wb["change"] == pytest.approx(0.1 - 0.9)  # against the attacked model's own clean
    assert tr["worst"].startswith("adversarial_diffusion") and tr["change"] == pytest.approx(0.6 - 0.9)
    # the whole family (the paper's definition, all models) is what the ordering reads
    assert s["families"]["adversarial"]["value"] == pytest.approx(0.4)
    protocol = {k: v for k, v in PAPERFULL.items() if not k[0].startswith("adversarial")}  # the attacks are values'
    side = _side(summary_blocks(_rows({**protocol, **values}), curated=True))
    assert side["adversarial white-box"][2:4] == ["10.0", "-80.0"]
    assert side["adversarial transfer"][2:4] == ["60.0", "-30.0"]
    # default source: efficientnet_lite0 is white-box, the other models transfer
    rows = [dict(model=m, shift=sh, params={}, severity=0 if sh == "clean" else 5, metric="top1", value=v, n=4)
            for m, sh, v in (("efficientnet_lite0", "clean", 0.5), ("efficientnet_lite1", "clean", 0.6),
                             ("efficientnet_lite0", "adversarial_texture", 0.0),
                             ("efficientnet_lite1", "adversarial_texture", 0.55))]
    s = summarise(rows)
    assert s["adversarial_whitebox"]["models"] == ["efficientnet_lite0"] and s["adversarial_whitebox"]["value"] == 0.0
    assert s["adversarial_transfer"]["models"] == ["efficientnet_lite1"]
    assert s["adversarial_transfer"]["change"] == pytest.approx(0.55 - 0.6)


def test_attack_source_defaults_match_the_shifts():
    import inspect

    from shiftbench.registry import shift_info
    from shiftbench.shifts.background.adversarial import AdversarialTexture

    key, default = shift_info("adversarial_texture").source
    assert inspect.signature(AdversarialTexture.__init__).parameters[key].default == default
    pytest.importorskip("diffusers")
    from shiftbench.shifts.background.diffusion import AdversarialDiffusion, Attack

    key, default = shift_info("adversarial_diffusion").source
    assert Attack in AdversarialDiffusion.option_groups and getattr(Attack(), key) == default


def test_bg_gap_per_model_with_a_paired_interval():
    """BG-Gap = Mixed-Same - Mixed-Rand per model and for the model mean; the paired bootstrap interval
    covers the gap, and identical per-sample values on both sides give exactly 0 within noise."""
    from shiftbench.report.objectcompose import bg_gap
    from shiftbench.report.stats import Uncertainty

    ids = [f"s{i}" for i in range(40)]
    same_p, rand_p = {"scene": "mixed_same"}, {"scene": "mixed_rand"}
    per_sample = {("a", "clean", ()): [1] * 40, ("a", "same", ()): [1] * 36 + [0] * 4,
                  ("a", "rand", ()): [1] * 20 + [0] * 20,
                  ("b", "clean", ()): [1] * 40, ("b", "same", ()): [1] * 30 + [0] * 10,
                  ("b", "rand", ()): [1] * 30 + [0] * 10}
    rows, samples = [], []
    for (model, which, _), vals in per_sample.items():
        shift, params, sev = ("clean", {}, 0) if which == "clean" else ("background_scene", same_p if which == "same" else rand_p, 5)
        rows.append(dict(model=model, shift=shift, params=params, severity=sev, metric="top1",
                         value=sum(vals) / 40, n=40))
        samples.append(dict(model=model, dataset="objects", shift=shift, params=params, severity=sev, metric="top1",
                            kind="mean", ids=ids, values=[float(v) for v in vals]))
    summary = summarise(rows, unc=Uncertainty(samples))
    assert summary["families"]["mixed_same"]["role"] == "natural scene"
    gap = summary["bg_gap"]
    a, b, mean = gap["per_model"]["a"], gap["per_model"]["b"], gap["mean"]
    assert a["gap"] == pytest.approx(0.9 - 0.5) and b["gap"] == 0.0 and mean["gap"] == pytest.approx(0.2)
    assert a["low"] <= a["gap"] <= a["high"] and a["low"] > 0 and not a["noise"] and a["p_value"] < 0.01
    assert b["low"] == b["high"] == 0.0 and b["noise"] and a["n"] == [40]
    assert mean["low"] <= mean["gap"] <= mean["high"]
    # without per-sample values: the gap, no interval
    plain = summarise(rows)["bg_gap"]["per_model"]["a"]
    assert plain["gap"] == pytest.approx(0.4) and plain["low"] is None
    # only one side: no gap
    assert summarise([r for r in rows if r["params"] != rand_p])["bg_gap"] is None
    assert bg_gap([], [], {}, {}, "top1") is None
    blocks = summary_blocks(rows, unc=Uncertainty(samples))
    i = next(k for k, bl in enumerate(blocks) if bl.get("text", "").startswith("BG-Gap"))
    table = blocks[i + 2]
    by = {cell_text(r[0]): [cell_text(c) for c in r] for r in table["rows"]}
    assert by["a"][1:4] == ["90.0", "50.0", "+40.0"] and by["b"][3] == "+0.0 ≈"
    assert by["mean of 2 models"][3] == "+20.0"
    # Mixed-Same stands in for the natural prompts in the ordering checks
    assert summary["ordering"]["class_label >= caption"] is None


def test_mixed_scenes_through_evaluate_store_and_report(tmp_path):
    """A user's run: Mixed-Same and Mixed-Rand on objects -> store -> report; the BG-Gap is in the
    ObjectCompose summary (JSON, Markdown) and in the headline, equal to the stored rows' difference."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        spec = {"dataset": "objects", "dataset_params": {"scenes_per_object": 1}, "limit": 16,
                "models": ["efficientnet_lite0"], "metrics": ["top1"], "seed": 0,
                "shifts": ["clean", {"name": "background_scene", "severity": 5, "params": {"scene": "mixed_same"}},
                           {"name": "background_scene", "severity": 5, "params": {"scene": "mixed_rand"}}]}
        rows = sb.evaluate(spec, store=tmp_path / "bg.db")
    finally:
        torch.set_num_threads(before)
    from shiftbench.report import build_report

    top1 = {r["params"].get("scene", "clean"): r["value"] for r in rows if r["metric"] == "top1"}
    build_report(tmp_path / "bg.db", tmp_path / "report")
    saved = json.loads((tmp_path / "report" / "objectcompose.json").read_text())
    g = saved["bg_gap"]["per_model"]["efficientnet_lite0"]
    assert g["gap"] == pytest.approx(top1["mixed_same"] - top1["mixed_rand"]) and g["n"] == [16]
    assert g["low"] is not None and g["low"] <= g["gap"] <= g["high"]
    assert set(saved["families"]) == {"mixed_same", "mixed_rand"}
    md = (tmp_path / "report" / "objectcompose.md").read_text()
    assert "BG-Gap (Mixed-Same minus Mixed-Rand)" in md and f"{100 * g['gap']:+.1f}" in md
    html = (tmp_path / "report" / "report.html").read_text()
    assert "BG-Gap" in html
    from shiftbench.report.headline import headline
    from shiftbench.report.stats import Uncertainty
    from shiftbench.report.tables import build_tables
    from shiftbench.results.records import load

    run, = load(tmp_path / "bg.db", None, ("results", "samples"))
    stored, samples = run.rows, run.samples
    head = headline(stored, build_tables(stored, ["top1"]), ["top1"], Uncertainty(samples))
    heads = [c.head for c in head.columns]
    assert heads == ["top1 (%)", "mixed_same", "mixed_rand", "BG-Gap"]
    cellg = head.rows[0].cells[3]
    assert cellg.text.split(" ")[0] == f"{100 * g['gap']:+.1f}" and cellg.ci.startswith("[")


# ---- a comparison with the paper only under its protocol (issue 27) ----

def test_one_texture_shift_gets_no_comparison_with_the_paper_and_one_line_why():
    from shiftbench.report.objectcompose import paper_protocol

    rows = _rows({("clean", ()): (0.9, 0.8), ("background_texture", (("texture", 2),)): (0.6, 0.5)})
    for curated in (False, True):
        blocks = summary_blocks(rows, curated=curated)
        text = [b["text"] for b in blocks if b["kind"] == "text"]
        assert not any(b.get("text") == "Ours vs the paper" for b in blocks)
        why = [t for t in text if t.startswith("No comparison with ObjectCompose Table 1")]
        assert len(why) == 1
        assert why[0].endswith("it lacks the natural prompts (class label and caption, or Mixed-Same on the compose "
                               "backend), color (0 of the paper's 4 prompts), texture (1 of the paper's 4 prompts), "
                               "the adversarial background.")
        assert ("the run is not curated" in why[0]) == (not curated)
        items = next(b for b in blocks if b["kind"] == "list")["items"]
        assert all("paper" not in item for item in items)  # the ordering on ours only
    # the paper's protocol: curated, top-1, every family with four colour and four texture prompts
    s = summarise(_rows(PAPERFULL), curated=True)
    assert s["paper_protocol"] == {"matches": True, "why": []}
    assert paper_protocol("ece", s["families"], True) == ["the paper's Table 1 is top-1, this summary is ece"]
    assert summarise(_rows(PAPERFULL))["paper_protocol"]["matches"] is False  # not curated
    # Mixed-Same stands in for the class-label and caption prompts on the compose backend
    compose = {k: v for k, v in PAPERFULL.items() if k[0] != "background_inpaint"}
    compose[("background_scene", (("scene", "mixed_same"),))] = (0.93, 0.91)
    assert summarise(_rows(compose), curated=True)["paper_protocol"]["matches"] is True
