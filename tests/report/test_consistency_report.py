"""Error consistency in the report (report/consistency.py): through sb.evaluate -> store -> build_report, the
Markdown's kappas equal scikit-learn's cohen_kappa_score on the store's own per-sample top-1 values pooled per
family; model names are escaped; a one-model run has no section; ids paired and families formed as documented."""

from __future__ import annotations

import io
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

import shiftbench as sb
from markdown_parse import markdown_blocks
from shiftbench.registry import shift_info
from shiftbench.report.build import build_report
from shiftbench.report.consistency import (ALL_SHIFTED, consistency_blocks, consistency_entries, consistency_figure,
                                           family_seed)
from shiftbench.results.records import Samples, load

EVIL = "<script>window.pwned=1</script>"
SPEC = {"dataset": "objects", "seed": 0, "limit": 12, "metrics": ["top1"], "batch_size": 12,
        "models": ["efficientnet_lite0", "efficientnet_lite1",
                   {"name": "dummy_classifier", "params": {"label_space": "imagenet1k", "dtype": EVIL}},
                   {"name": "dummy_classifier", "params": {"label_space": "imagenet1k", "seed": 1}}],
        "shifts": ["clean", {"name": "gaussian_noise", "severities": [2, 4]}, {"name": "fog", "severities": [3]}]}


def sk_kappa(a, b) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns on the undefined case and answers NaN
        return float(cohen_kappa_score(np.asarray(a, int), np.asarray(b, int), labels=[0, 1]))


def text(k: float) -> str:
    return "undefined" if math.isnan(k) else f"{k:.2f}"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("consistency")
    sb.evaluate(SPEC, store=tmp / "r.db")
    html = build_report(tmp / "r.db", tmp / "out")
    return {"db": tmp / "r.db", "out": tmp / "out", "html": html.read_text(encoding="utf-8")}


def _direct(db: Path) -> dict[str, dict[tuple[str, str], float]]:
    """Per family, each pair's kappa from the store's per-sample values: every condition's vectors, paired by
    sample id, concatenated (the family's pooled (condition, image) pairs), through scikit-learn."""
    samples = [s for s in load(db, None, ("samples",))[0].samples if s.metric == "top1"]
    models = list(dict.fromkeys(s.model for s in samples))
    conds: dict[tuple, dict[str, dict[str, int]]] = {}
    for s in samples:
        conds.setdefault((s.shift, s.params_key, s.severity), {})[s.model] = dict(zip(s.ids, s.values.tolist()))
    fams: dict[str, list[dict[str, dict[str, int]]]] = {}
    for (shift, _, _), per in conds.items():
        fams.setdefault("clean" if shift == "clean" else shift_info(shift).family, []).append(per)
    fams[ALL_SHIFTED] = [per for f, c in fams.items() if f != "clean" for per in c]
    out = {}
    for fam, per_list in fams.items():
        vec = {m: [] for m in models}
        for per in per_list:
            ids = sorted(set.intersection(*(set(per[m]) for m in models)))
            for m in models:
                vec[m] += [per[m][i] for i in ids]
        out[fam] = {(a, b): sk_kappa(vec[a], vec[b]) for a in models for b in models if a != b}
    return out


def test_the_markdown_numbers_are_kappa_of_the_stores_values(run):
    md = (run["out"] / "consistency.md").read_text(encoding="utf-8")
    blocks = markdown_blocks(md)
    direct = _direct(run["db"])
    assert set(direct) == {"clean", "noise", "weather", ALL_SHIFTED}
    headings = [b["text"] for b in blocks if b["kind"] == "heading"][1:]
    assert [h.split(":")[0] for h in headings] == ["clean", "noise", "weather", ALL_SHIFTED]
    tables = [b for b in blocks if b["kind"] == "table"][1:]  # after the overview
    checked = 0
    for heading, table in zip(headings, tables):
        fam = heading.split(":")[0]
        columns = table["head"][1:]
        for row in table["rows"]:
            for col, value in zip(columns, row[1:]):
                if not value:
                    continue  # the upper triangle
                k = direct[fam][(row[0], col)]
                assert value.split(" [")[0] == text(k), (fam, row[0], col)
                if value != "undefined":
                    low, high = (float(x) for x in value.split(" [")[1].rstrip("]").split(", "))
                    assert low <= float(value.split(" [")[0]) <= high
                checked += 1
    assert checked == 4 * 6
    # lite0 and lite1 differ somewhere; the two dummies (wrong on every image) have no kappa, and say why
    assert any(0 < abs(k) < 1 for fam in direct.values() for k in fam.values() if not math.isnan(k))
    assert "undefined" in tables[0]["rows"][2] and "wrong on every sample" in run["html"]
    assert any(EVIL in c for c in tables[0]["head"] + [r[0] for r in tables[0]["rows"]])


def test_the_html_holds_the_matrix_and_escapes_model_names(run):
    html = run["html"]
    assert "Error consistency" in html and 'id="run1-error-consistency"' in html
    assert "κ [95% CI]" in html and "error_consistency.png" in html
    assert EVIL not in html and "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html
    assert (run["out"] / "error_consistency.png").stat().st_size > 0


def test_the_same_store_gives_the_same_section(run, tmp_path):
    build_report(run["db"], tmp_path / "again")
    assert (tmp_path / "again" / "consistency.md").read_bytes() == (run["out"] / "consistency.md").read_bytes()


def test_a_one_model_run_has_no_section(tmp_path):
    spec = {**SPEC, "models": ["efficientnet_lite0"], "limit": 4, "shifts": ["clean"]}
    sb.evaluate(spec, store=tmp_path / "r.db")
    html = build_report(tmp_path / "r.db", tmp_path / "out").read_text(encoding="utf-8")
    assert "Error consistency" not in html and not (tmp_path / "out" / "consistency.md").exists()


def _s(model, shift, severity, values, ids=None, dataset="d"):
    values = np.asarray(values, np.uint8)
    return Samples(model, dataset, shift, {}, severity, metric="top1", kind="mean",
                   ids=ids if ids is not None else [f"i{k}" for k in range(len(values))], values=values)


def test_ids_pair_conditions_every_model_lacks_are_left_out_and_families_order():
    rng = np.random.default_rng(1)
    v = {(m, c): (rng.random(10) < 0.6).astype(np.uint8) for m in "ab" for c in range(4)}
    samples = [_s("a", "clean", 0, v["a", 0]), _s("b", "clean", 0, v["b", 0]),
               _s("a", "fog", 3, v["a", 1]), _s("b", "fog", 3, v["b", 1][:9], ids=[f"i{k}" for k in range(9)]),
               _s("a", "gaussian_noise", 2, v["a", 2]), _s("b", "gaussian_noise", 2, v["b", 2]),
               _s("a", "gaussian_noise", 5, v["a", 3]),  # b has no values here: left out
               _s("a", "clean", 0, [0.5] * 10, dataset="other"),  # not right/wrong: ignored
               Samples("b", "d", "clean", {}, 0, metric="ece", kind="ece:15", ids=["i0"], values=np.zeros((1, 2)))]
    entries = consistency_entries(samples, seed=4)
    assert [e.family for e in entries] == ["clean", "noise", "weather", ALL_SHIFTED]
    by = {e.family: e for e in entries}
    assert by["weather"].matrix.n == 9 and by["noise"].conditions == 1 and by[ALL_SHIFTED].conditions == 2
    pooled_a = np.concatenate([v["a", 2], v["a", 1][:9]])
    pooled_b = np.concatenate([v["b", 2], v["b", 1][:9]])
    assert by[ALL_SHIFTED].matrix.n == 19 and by[ALL_SHIFTED].matrix.units == 10
    assert by[ALL_SHIFTED].matrix.kappa[0, 1] == pytest.approx(sk_kappa(pooled_a, pooled_b), nan_ok=True)
    assert by["clean"].matrix.kappa[0, 1] == pytest.approx(sk_kappa(v["a", 0], v["b", 0]), nan_ok=True)
    assert consistency_entries(samples, seed=4)[0].matrix.low[0, 1] == by["clean"].matrix.low[0, 1]
    assert family_seed(4, "clean") != family_seed(4, "noise") != family_seed(5, "noise")
    assert consistency_entries(samples[:1]) == [] and consistency_entries(None) == []


def test_ten_models_stay_readable(tmp_path):
    rng = np.random.default_rng(0)
    models = [f"model_{k}_with_a_long_name_$x$" for k in range(10)]
    samples = [_s(m, shift, sev, rng.random(50) < 0.7) for m in models
               for shift, sev in (("clean", 0), ("fog", 3), ("gaussian_noise", 2), ("contrast", 4))]
    entries = consistency_entries(samples)
    assert [e.family for e in entries] == ["clean", "noise", "weather", "digital", ALL_SHIFTED]
    blocks = consistency_blocks(entries)
    assert all(len(b["head"]) == 10 for b in blocks if b["kind"] == "table" and b["head"][0] == "κ [95% CI]")
    saved = {}

    def save(fig, out, name, title, caption):
        w, h = fig.get_size_inches()
        fig.savefig(io.BytesIO(), format="png", dpi=50)  # draws every label: a "$" must not open mathtext
        saved.update(name=name, size=(w, h))
        return {"file": name}

    assert consistency_figure(entries, tmp_path, "run2_", save) == {"file": "run2_error_consistency.png"}
    assert saved["size"][0] < 22 and saved["size"][1] < 16  # 5 panels of 10 models: 3 per row


def test_every_pair_undefined_has_tables_that_say_why_and_no_figure(tmp_path):
    samples = [_s(m, "clean", 0, [0] * 6) for m in ("a", "b", "c")]
    entries = consistency_entries(samples)
    rows = consistency_blocks(entries)[-1]["rows"]
    assert [c["text"] for r in rows for c in r[1:] if c] == ["undefined"] * 3
    assert all("wrong on every sample" in c["title"] for r in rows for c in r[1:] if c)
    assert consistency_figure(entries, tmp_path, "", lambda *a: pytest.fail("no figure expected")) is None
