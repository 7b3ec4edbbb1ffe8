"""Deterministic weight-free models for every task, for tests of the runner (numpy only, fast).

Each output is a fixed function of the pixels, so shifts change it and reruns reproduce it:

- ``dummy_classifier``: logits = a fixed random projection (``seed``) of colour statistics
  (per-channel mean and standard deviation, and a 4x4 grid of mean brightness).
- ``dummy_segmenter``: foreground = colour distance from the median border colour (class-agnostic),
  or, with ``num_classes``, brightness bands as classes.
- ``dummy_detector``: one box around the dummy segmenter's foreground, labelled by the dummy classifier.
- ``dummy_captioner``: "a photo of a {colour} {brightness} scene" from the mean colour.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..seeds import check_seed
from .base import (
    Answerer, Captioner, Classifier, Detections, Detector, LabelSpace, Segmenter, as_image_list, check_outputs,
)

__all__ = ["DummyClassifier", "DummySegmenter", "DummyDetector", "DummyCaptioner", "DummyAnswerer"]

# dummies read raw pixels at any size: they declare no preprocessing
_NO_PREPROCESS = None


def _label_space(label_space: str | int | Sequence[str]) -> LabelSpace:
    if isinstance(label_space, str) and label_space == "imagenet1k":
        return LabelSpace.imagenet1k()
    if isinstance(label_space, int):
        return LabelSpace.numbered(f"dummy{label_space}", label_space)
    if isinstance(label_space, str):
        raise ValueError(f"label_space must be 'imagenet1k', a class count or a list of names, got {label_space!r}")
    names = tuple(str(c) for c in label_space)
    return LabelSpace(f"custom{len(names)}", names)


def _features(image: np.ndarray) -> np.ndarray:
    x = image.astype(np.float32) / 255.0
    h, w = x.shape[:2]
    grey = x.mean(axis=2)
    ys = np.linspace(0, h, 5).astype(int)
    xs = np.linspace(0, w, 5).astype(int)
    # 4x4 grid means from a summed-area table (no loops over pixels)
    sat = np.pad(grey.cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    cells = (sat[ys[1:], :][:, xs[1:]] - sat[ys[:-1], :][:, xs[1:]] - sat[ys[1:], :][:, xs[:-1]]
             + sat[ys[:-1], :][:, xs[:-1]])
    area = np.outer(np.maximum(np.diff(ys), 1), np.maximum(np.diff(xs), 1))
    grid = (cells / area).ravel()
    return np.concatenate([x.mean(axis=(0, 1)), x.std(axis=(0, 1)), grid, [1.0]]).astype(np.float64)


class DummyClassifier(Classifier):
    """Deterministic classifier: a fixed random projection of colour statistics."""

    def __init__(self, label_space: str | int | Sequence[str] = "imagenet1k", seed: int = 0,
                 device: str = "cpu", dtype: str = "float32"):
        self.name = "dummy_classifier"
        self.label_space = _label_space(label_space)
        self.preprocess = _NO_PREPROCESS
        self.seed = check_seed(seed, "dummy_classifier: seed")
        rng = np.random.default_rng(self.seed)
        self._weights = rng.normal(0.0, 4.0, size=(self.label_space.num_classes, 23))

    def predict_logits(self, images: Sequence[np.ndarray]) -> np.ndarray:
        images = as_image_list(images)
        if not images:
            return np.zeros((0, self.label_space.num_classes), np.float32)
        feats = np.stack([_features(im) for im in images])
        logits = (feats @ self._weights.T).astype(np.float32)
        check_outputs(logits, self.name, num_classes=self.label_space.num_classes, batch_size=len(images))
        return logits


def _foreground(image: np.ndarray) -> np.ndarray:
    x = image.astype(np.float32)
    border = np.concatenate([x[0], x[-1], x[:, 0], x[:, -1]])
    reference = np.median(border, axis=0)
    distance = np.sqrt(((x - reference) ** 2).sum(axis=2)) / (255.0 * np.sqrt(3.0))
    # a steep logistic around 10% of the largest possible colour distance
    return (1.0 / (1.0 + np.exp(-(distance - 0.1) * 40.0))).astype(np.float32)


class DummySegmenter(Segmenter):
    """Deterministic segmenter: border-colour distance (class-agnostic) or brightness bands."""

    def __init__(self, num_classes: int | None = None, device: str = "cpu", dtype: str = "float32"):
        self.name = "dummy_segmenter"
        self.class_agnostic = num_classes is None
        self.label_space = LabelSpace.foreground() if num_classes is None else LabelSpace.numbered(
            f"dummy{num_classes}", int(num_classes))
        self.preprocess = _NO_PREPROCESS

    def predict(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        out = []
        for image in as_image_list(images):
            if self.class_agnostic:
                out.append(_foreground(image))
                continue
            c = self.label_space.num_classes
            grey = image.astype(np.float32).mean(axis=2) / 255.0
            centres = (np.arange(c, dtype=np.float32) + 0.5) / c
            out.append((-np.abs(grey[None] - centres[:, None, None]) * c).astype(np.float32))
        return out


class DummyDetector(Detector):
    """Deterministic detector: one box around the border-distance foreground, if any."""

    def __init__(self, label_space: str | int | Sequence[str] = "imagenet1k", with_masks: bool = True,
                 device: str = "cpu", dtype: str = "float32"):
        self.name = "dummy_detector"
        self._classifier = DummyClassifier(label_space)
        self.label_space = self._classifier.label_space
        self.preprocess = _NO_PREPROCESS
        self.with_masks = with_masks

    def predict(self, images: Sequence[np.ndarray]) -> list[Detections]:
        images = as_image_list(images)
        logits = self._classifier.predict_logits(images)
        out = []
        for image, row in zip(images, logits):
            prob = _foreground(image)
            mask = prob >= 0.5
            if not mask.any():
                out.append(Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0),
                                      np.zeros((0, *mask.shape), bool) if self.with_masks else None))
                continue
            ys, xs = np.nonzero(mask)
            box = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
            out.append(Detections(np.array([box]), np.array([prob[mask].mean()]), np.array([int(row.argmax())]),
                                  mask[None] if self.with_masks else None))
        return out


_COLOURS = {
    "red": (200, 40, 40), "green": (40, 160, 60), "blue": (40, 70, 200), "yellow": (220, 210, 50),
    "orange": (230, 140, 30), "purple": (130, 50, 160), "brown": (120, 80, 40), "grey": (128, 128, 128),
    "white": (240, 240, 240), "black": (15, 15, 15),
}


class DummyAnswerer(Answerer):
    """Deterministic stand-in for an image-text-to-text model (tests): to a multiple-choice prompt it answers the
    letter picked by the image's mean brightness, to a yes/no prompt "Yes." on bright images and "No." on dark
    ones, and to an open question the class of ``vocabulary`` picked by the image's dominant channel (or "I cannot
    tell." without one): answers that move when the image does, as a real model's would."""

    def __init__(self, vocabulary: Sequence[str] | None = None, device: str = "cpu", dtype: str = "float32"):
        self.name = "dummy_vlm"
        self.preprocess = _NO_PREPROCESS
        self.vocabulary = list(vocabulary) if vocabulary else []
        self.generation = {"max_new_tokens": 16, "do_sample": False, "num_beams": 1}

    def answer(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[str]:
        images = as_image_list(images)
        if len(images) != len(prompts):
            raise ShiftbenchError(f"dummy_vlm: {len(images)} images but {len(prompts)} prompts")
        out = []
        for image, prompt in zip(images, prompts):
            mean = image.reshape(-1, 3).astype(np.float64).mean(axis=0)
            letters = [line[0] for line in prompt.splitlines() if len(line) > 2 and line[1] == "." and line[0].isupper()]
            if letters:
                out.append(f"{letters[int(mean.mean()) % len(letters)]}.")
            elif "yes or no" in prompt.lower():
                out.append("Yes." if mean.mean() > 110 else "No.")
            elif self.vocabulary:
                out.append(f"It is a {self.vocabulary[int(mean.argmax() + 3 * (mean.mean() > 120)) % len(self.vocabulary)]}.")
            else:
                out.append("I cannot tell.")
        return out


class DummyCaptioner(Captioner):
    """Deterministic captioner naming the nearest basic colour and the brightness of the image."""

    def __init__(self, device: str = "cpu", dtype: str = "float32"):
        self.name = "dummy_captioner"
        self.preprocess = _NO_PREPROCESS

    def predict(self, images: Sequence[np.ndarray]) -> list[str]:
        names = list(_COLOURS)
        table = np.array([_COLOURS[n] for n in names], np.float32)
        out = []
        for image in as_image_list(images):
            mean = image.reshape(-1, 3).mean(axis=0)
            colour = names[int(((table - mean) ** 2).sum(axis=1).argmin())]
            brightness = "bright" if mean.mean() > 150 else "dark" if mean.mean() < 80 else "dim"
            out.append(f"a photo of a {colour} {brightness} scene")
        return out
