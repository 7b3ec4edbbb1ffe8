"""configs/objects_attributes.yaml: Pascal-EA's attribute edits on the three bundled classifiers. The config
holds the paper's 12 edits; cut to 4 samples and two edits it runs through sb.evaluate -> store -> report
with top-1 and ECE rows for every model and condition; benchmarks/attributes_classifiers.py reads the same
changes back from the store and checks the paper's order."""

from __future__ import annotations

from pathlib import Path

import shiftbench as sb
from shiftbench.conditioning.attribute_text import ATTRIBUTES
from shiftbench.spec import load_spec

from conftest import load_benchmark
from e2e import report_tables

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "objects_attributes.yaml"
MODELS = ["efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2"]


def _bench():
    return load_benchmark("attributes_classifiers", "bench_attr_cls")


def test_config_holds_the_twelve_edits_at_severity_5_on_the_classic_backend():
    spec = load_spec(CONFIG)
    edits = [s for s in spec.shifts if s.name != "clean"]
    family = {s.name[len("attribute_"):] for s in edits}
    values = sorted(s.params[s.name[len("attribute_"):]] for s in edits)
    assert family == set(ATTRIBUTES) and values == sorted(v for vs in ATTRIBUTES.values() for v in vs)
    assert all(s.severities == (5,) and s.params["backend"] == "classic" for s in edits)
    assert [s.name for s in spec.shifts].count("clean") == 1
    assert [m.name for m in spec.models] == MODELS and spec.metrics == ["top1", "ece"] and spec.seed == 0
    assert spec.dataset_params == {"scenes_per_object": 4} and spec.curate.as_dict() == {"models": None, "min_mask_fraction": None}


def test_cut_config_runs_to_store_and_report(tmp_path):
    spec = load_spec(CONFIG)
    spec.limit = 4
    spec.curate = None  # four samples: curation is tested in engine/test_curate_protocol.py
    keep = ({"material": "paper", "backend": "classic"}, {"style": "sketch", "backend": "classic"})
    spec.shifts = [s for s in spec.shifts if s.name == "clean" or s.params in keep]
    assert len(spec.shifts) == 3
    db = tmp_path / "attr.db"
    rows = sb.evaluate(spec, store=db)

    conditions = {("clean", ()), ("attribute_material", (("material", "paper"),)),
                  ("attribute_style", (("style", "sketch"),))}
    got = {(r["model"], r["shift"], tuple(sorted((k, v) for k, v in r["params"].items() if k != "backend")),
            r["metric"]) for r in rows}
    assert got == {(m, s, p, metric) for m in MODELS for s, p in conditions for metric in ("top1", "ece")}
    assert all(r["n"] == 4 and 0.0 <= r["value"] <= 1.0 for r in rows)
    assert all(r["severity"] == (0 if r["shift"] == "clean" else 5) for r in rows)

    tables, _, html = report_tables(db, tmp_path / "rep")
    top1 = next(t for t in tables if t[0][:4] == ["condition"] + MODELS)
    labels = [row[0] for row in top1[1:]]
    assert labels[0] == "clean" and any("material=paper" in x for x in labels) and any("style=sketch" in x for x in labels)
    assert (tmp_path / "rep" / "tables.csv").exists()

    # the benchmark's table is the stored rows' changes, in points
    result = _bench().main(["--store", str(db), "--subset"])
    value = {(r["model"], r["shift"], r["metric"]): r["value"] for r in rows}
    for m in MODELS:
        want = 100.0 * (value[(m, "attribute_style", "top1")] - value[(m, "clean", "top1")])
        assert abs(result["changes"][m]["sketch"] - want) < 1e-9
        assert set(result["changes"][m]) >= {"paper", "sketch"}
    assert result["verdict"]["mean"]["rank"].keys() == {"paper", "sketch"}


def test_verdict_computes_the_papers_order():
    bench = _bench()
    v = bench.verdict(bench.PAPER)
    assert v["worst_is_material_and_sketch"] and v["spearman_vs_paper"] == 1.0
    assert v["paper_family_order"] == ["style", "material", "color", "pattern"] == v["family_order"]
    swapped = {**bench.PAPER, "sketch": -1.0, "dotted": -60.0}
    w = bench.verdict(swapped)
    assert not w["worst_is_material_and_sketch"] and w["rank"]["dotted"] == 1 and w["rank"]["sketch"] == 12
    assert bench.spearman([1, 2, 3], [3, 2, 1]) == -1.0
