"""End to end, captioning: a hub captioner (tiny BLIP-2 from a folder, by name in the spec) on the built-in
``objects`` data through ``sb.evaluate -> store -> report``; text similarity recomputed by hand; a run
killed mid-run resumes to the same rows."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
import tiny_hub
from e2e import kill_and_resume, report_tables, row_key
from shiftbench.results.store import Store

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def blip2(tmp_path_factory):
    import torch
    import transformers

    folder = tiny_hub.save_tiny_blip2(tmp_path_factory.mktemp("hub") / "blip2")
    # a random decoder tends to emit special tokens, which decode to "": zero their output rows so that
    # greedy decoding picks words, as a trained captioner does
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.Blip2ForConditionalGeneration.from_pretrained(folder)
    with torch.no_grad():
        model.get_output_embeddings().weight[sorted(set(tok.all_special_ids))] = 0.0
    model.save_pretrained(folder)
    return folder


def _spec(folder) -> dict:
    return {"dataset": "objects", "limit": 6, "batch_size": 2, "seed": 0, "log_samples": True,
            "models": [{"name": f"hf:{folder}", "params": {"max_new_tokens": 4}}],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [3]}],
            "metrics": ["text_similarity"]}


def test_captioner_through_runner_store_and_report(blip2, tmp_path, one_thread):
    spec = _spec(blip2)
    ref, resumed, partial = kill_and_resume(spec, tmp_path, min_batches=2, delay=0.5)
    assert 0 <= len(partial) < len(ref) and row_key(resumed) == row_key(ref)
    # the stored captions, scored again with the same sentence encoder, give the stored mean similarity
    store = Store(tmp_path / "resumed.db")
    run_id = resumed[0]["run_id"]
    preds = [p for p in store.predictions(run_id) if p["shift"] == "clean"]
    assert len(preds) == 6 and all(isinstance(p["prediction"]["caption"], str) for p in preds)
    data = sb.load_dataset("objects", limit=6)
    refs = {data.sample_id(i): data.load(i).caption for i in range(6)}
    assert all(p["prediction"]["reference"] == refs[p["sample_id"]] for p in preds)
    metric = sb.create_metric("text_similarity")
    metric.update([p["prediction"]["caption"] for p in preds], [p["prediction"]["reference"] for p in preds])
    value = metric.compute()["text_similarity"]
    clean = [r for r in resumed if r["shift"] == "clean" and r["metric"] == "text_similarity"][0]
    assert clean["value"] == pytest.approx(value, abs=1e-5) and -1 <= clean["value"] <= 1 and clean["n"] == 6
    store.close()
    tables, images, html = report_tables(tmp_path / "resumed.db", tmp_path / "report")
    assert "text_similarity" in html
    results = next(t for t in tables if t[0][0] == "condition")
    clean_row = next(row for row in results if row[0] == "clean")
    assert clean_row[1] == f"{100 * clean['value']:.1f}"  # shown in percent
    assert images, "the report shows sample grids"
    grid = next(t for t in tables if t[0][0] == "sample")
    captions = {p["sample_id"]: p["prediction"]["caption"] for p in preds}
    for row in grid[1:]:  # each grid sample shows its clean caption, with no right/wrong mark
        assert captions[row[0]].strip() and row[1].endswith(f": {captions[row[0]]}") and "✓" not in row[1]
    assert np.isfinite([r["value"] for r in resumed]).all()
