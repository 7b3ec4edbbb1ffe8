"""Tiny deterministic encoders for composed-retrieval tests (no weights, no torch), and the objects-cir spec
the retrieval engine and report tests share."""

from __future__ import annotations

import zlib

import numpy as np


# the fake retrievers on objects-cir's val split; _test_noise is tiny_registry's image shift
SPEC = {"dataset": "objects-cir", "dataset_params": {"split": "val"},
        "models": ["image_only", "text_only", "sum_fusion", "combiner"],
        "shifts": ["clean", {"name": "_test_noise", "severities": [2, 5]}, {"name": "text_swap", "severity": 3}],
        "metrics": ["recall", "recall_subset", "rank"], "limit": 35}


class ColourGridEncoder:
    """Image features: mean colour of a 4x4 grid of cells (48-d), centred; sensitive to colour and layout."""

    key = "test_colour_grid"
    dim = 48

    def encode(self, images):
        out = []
        for im in images:
            h, w = im.shape[:2]
            cells = im[: h // 4 * 4, : w // 4 * 4].reshape(4, h // 4, 4, w // 4, 3).mean(axis=(1, 3))
            out.append(cells.reshape(-1) / 255.0 - 0.5)
        return np.asarray(out, np.float32).reshape(-1, self.dim)


class HashedWordsEncoder:
    """Text features: hashed bag of words (48-d)."""

    key = "test_hashed_words"
    dim = 48

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for word in t.lower().split():
                out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        return out


class SharedModel:
    """A CLIP-like model with both towers in one 48-d space."""

    name = "test_shared"

    def __init__(self):
        self.image, self.text = ColourGridEncoder(), HashedWordsEncoder()

    def encode_images(self, images):
        return self.image.encode(images)

    def encode_texts(self, texts):
        return self.text.encode(texts)


def random_weights(image_dim=48, text_dim=48, hidden=8, seed=0):
    """Checkpoint tensors of a tiny random combiner and text projection."""
    import torch

    from shiftbench.models.retrieval_training import CombinerNet

    torch.manual_seed(seed)
    net = CombinerNet(image_dim, text_dim, hidden)
    proj = torch.nn.Linear(text_dim, image_dim)
    weights = {f"combiner.{k}": v.detach().numpy().copy() for k, v in net.state_dict().items()}
    weights.update({f"text_only.{k}": v.detach().numpy().copy() for k, v in proj.state_dict().items()})
    return weights


def fake_retrievers(weights=None):
    """The four retrievers on the fake encoders (combiner / text_only with random weights)."""
    from shiftbench.models.retrieval import Combiner, ImageOnly, SumFusion, TextOnly

    weights = weights or random_weights()
    enc = {"image_encoder": ColourGridEncoder(), "text_encoder": HashedWordsEncoder()}
    return {
        "image_only": ImageOnly(**enc),
        "text_only": TextOnly(weights=weights, **enc),
        "sum_fusion": SumFusion(encoder=SharedModel()),
        "combiner": Combiner(weights=weights, **enc),
    }
