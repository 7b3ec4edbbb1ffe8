"""End to end, composed retrieval: a CIRR-format folder a user brings, the bundled retrievers and a sum fusion on
a hub CLIP (tiny, from a folder) through ``shiftbench evaluate -> store -> shiftbench report``; a run killed
mid-run resumes to the same rows; Recall@K recomputed from the stored ranks."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import tiny_hub
from cirr_synth import make_cirr, write_image
from e2e import kill_and_resume, report_tables, row_key
from shiftbench.cli import cli
from shiftbench.results.store import Store

pytest.importorskip("transformers")


def _spec(root, clip) -> dict:
    return {"dataset": str(root), "seed": 0, "log_samples": True,
            "models": ["image_only", "combiner", {"name": "sum_fusion", "params": {"encoder": f"hf:{clip}"}}],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [5]}, {"name": "text_qwerty", "severities": [3]}],
            "metrics": ["recall", "recall_subset"]}


def test_cirr_folder_through_cli_store_and_report(tmp_path, one_thread):
    arrays = make_cirr(tmp_path / "cirr")
    for i, name in enumerate(sorted(arrays)):  # the reader fixture's 8 px images are too small for corruptions
        write_image(tmp_path / "cirr" / "img_raw" / "dev" / f"{name}.png", 100 + i, (48, 48))
    clip = tiny_hub.save_tiny_clip(tmp_path / "clip")
    spec = _spec(tmp_path / "cirr", clip)
    ref, resumed, partial = kill_and_resume(spec, tmp_path, min_batches=0, min_done=2, delay=1.0)
    assert 0 < len(partial) < len(ref) and row_key(resumed) == row_key(ref)
    # R@K from the stored per-query ranks equals the stored R@K
    store = Store(tmp_path / "resumed.db")
    run_id = resumed[0]["run_id"]
    for model in ("image_only", "combiner", "sum_fusion"):
        ranks = [p["prediction"]["rank"] for p in store.predictions(run_id)
                 if p["model"] == model and p["shift"] == "clean"]
        assert len(ranks) == 2
        for k in (1, 5):
            row = next(r for r in resumed if (r["model"], r["shift"], r["metric"]) == (model, "clean", f"R@{k}"))
            assert row["value"] == pytest.approx(sum(r <= k for r in ranks) / len(ranks))
    store.close()
    # the same spec through the CLI into a fresh store gives the same rows; the report is built from the store
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    runner = CliRunner()
    out = runner.invoke(cli, ["evaluate", "--config", str(tmp_path / "spec.yaml"), "--store", str(tmp_path / "cli.db"),
                              "--results-json", str(tmp_path / "rows.json")])
    assert out.exit_code == 0, out.output
    assert row_key(json.loads((tmp_path / "rows.json").read_text())) == row_key(ref)
    out = runner.invoke(cli, ["report", "--store", str(tmp_path / "cli.db"), "--out", str(tmp_path / "rep")])
    assert out.exit_code == 0, out.output
    tables, images, html = report_tables(tmp_path / "cli.db", tmp_path / "rep2")
    assert "R@1" in html and "sum_fusion" in html and "text_qwerty" in html
