"""transformers adapters (``hf:ID_OR_PATH``): CLIP/SigLIP zero-shot, DETR-style detectors, semantic
segmenters, image classifiers, BLIP-2 captioners and chat vision-language models (question answering,
:mod:`shiftbench.models.vlm`), from a hub id or a local folder.

The task is read from the folder's ``config.json`` (``model_type`` / ``architectures``) unless ``task``
is given. Preprocessing is the model's own image processor (``preprocessor_config.json``); the
declared :class:`Preprocess` is derived from the same config for the run record. A hub id loads
through the Hugging Face cache (set ``HF_HUB_OFFLINE=1`` to forbid downloads).

>>> sorted(ZERO_SHOT_TYPES)[:2]
['align', 'altclip']
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..install import install_command
from ..labelspace import recognize
from .base import (
    Captioner, Classifier, Detections, Detector, LabelSpace, Segmenter, ZeroShotClassifier, as_image_list,
    check_outputs,
)
from .hf_base import HFBase, preprocess_from_processor
from .labels import imagenet_templates

__all__ = ["create", "HFBase", "HFZeroShotClassifier", "HFClassifier", "HFDetector", "HFSegmenter", "HFCaptioner",
           "preprocess_from_processor", "detect_task"]

ZERO_SHOT_TYPES = {"clip", "siglip", "siglip2", "chinese_clip", "altclip", "align", "metaclip_2"}
CAPTION_TYPES = {"blip-2", "blip_2", "blip", "git", "instructblip"}
# chat vision-language models (image-text-to-text with a prompt): asked questions, not captioners
VLM_TYPES = {"aya_vision", "cohere2_vision", "deepseek_vl", "fast_vlm", "gemma3", "gemma3n", "glm4v", "idefics2",
             "idefics3", "internvl", "lfm2_vl", "llama4", "llava", "llava_next", "llava_onevision", "mistral3",
             "mllama", "ovis2", "paligemma", "perception_lm", "qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe",
             "smolvlm", "vipllava"}


def detect_task(config: Any) -> str:
    """One of ``zero_shot``, ``classification``, ``detection``, ``segmentation``, ``captioning``,
    ``question_answering`` (chat vision-language models, :data:`VLM_TYPES`)."""
    model_type = getattr(config, "model_type", "")
    archs = " ".join(getattr(config, "architectures", None) or [])
    if model_type in ZERO_SHOT_TYPES:
        return "zero_shot"
    if model_type in VLM_TYPES:
        return "question_answering"
    if model_type in CAPTION_TYPES or "ForConditionalGeneration" in archs or "ForCausalLM" in archs:
        return "captioning"
    if "ForObjectDetection" in archs:
        return "detection"
    if "ForSemanticSegmentation" in archs or "ForUniversalSegmentation" in archs:
        return "segmentation"
    if "ForImageClassification" in archs:
        return "classification"
    raise ShiftbenchError(
        f"cannot tell the task of a transformers model of type {model_type!r} ({archs or 'no architectures'}); "
        "pass task='zero_shot' | 'classification' | 'detection' | 'segmentation' | 'captioning' | "
        "'question_answering'"
    )


def _label_space(config: Any, fallback_name: str) -> LabelSpace:
    """The space of a config's ``id2label``: a built-in one when the names are its names slot by slot
    (COCO's 91 slots with "N/A" gaps, ImageNet's lemma lists, ADE-150, ...), else a custom space."""
    id2label = {int(k): str(v) for k, v in (getattr(config, "id2label", None) or {}).items()}
    if not id2label:
        return LabelSpace.numbered(fallback_name, int(getattr(config, "num_labels", 0)))
    n = max(id2label) + 1
    return recognize([id2label.get(i, "N/A") for i in range(n)], fallback_name)


def _embedding(output: Any) -> Any:
    """transformers 4 returns the projected embedding as a tensor, 5 in ``pooler_output``."""
    if hasattr(output, "pooler_output"):
        return output.pooler_output
    return output


class HFZeroShotClassifier(HFBase, ZeroShotClassifier):
    """CLIP-family zero-shot classifier (CLIP, SigLIP, ...): ImageNet-1k with the 80 templates by default."""

    def __init__(self, source: str, device: str = "cpu", dtype: str = "float32", revision: str | None = None,
                 classes: Sequence[str] | None = None, templates: Sequence[str] | None = None):
        import transformers

        self.name = f"hf:{source}"
        self._load(source, transformers.AutoModel, device, dtype, "AutoImageProcessor", revision)
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(source, **({"revision": revision} if revision else {}))
        self.model_type = self.module.config.model_type
        # SigLIP was trained on max-length padded text; CLIP on padding to the longest
        self._padding = "max_length" if self.model_type.startswith("siglip") else True
        self.logit_scale = float(self.module.logit_scale.exp().item())
        bias = getattr(self.module, "logit_bias", None)
        self.logit_bias = float(bias.reshape(-1)[0].item()) if bias is not None else 0.0
        if classes is None:
            self.set_classes(LabelSpace.imagenet1k(), templates or imagenet_templates())
        else:
            self.set_classes(list(classes), templates or imagenet_templates())

    def encode_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        import torch

        images = as_image_list(images)
        with torch.inference_mode():
            feats = _embedding(self.module.get_image_features(**self._pixels(images))).float()
        feats = torch.nn.functional.normalize(feats, dim=-1).cpu().numpy()
        check_outputs(feats, self.name, batch_size=len(images))
        return feats

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        texts = [str(t) for t in texts]
        max_length = getattr(self.module.config.text_config, "max_position_embeddings", 77)
        tokens = self.tokenizer(texts, padding=self._padding, truncation=True, max_length=max_length, return_tensors="pt")
        tokens = {k: v.to(self.device) for k, v in tokens.items() if k in ("input_ids", "attention_mask")}
        if self.model_type.startswith("siglip"):
            tokens.pop("attention_mask", None)  # SigLIP's text tower attends to the padding it was trained with
        with torch.inference_mode():
            feats = _embedding(self.module.get_text_features(**tokens)).float()
        feats = torch.nn.functional.normalize(feats, dim=-1).cpu().numpy()
        check_outputs(feats, self.name, batch_size=len(texts))
        return feats

    def predict_logits(self, images: Sequence[np.ndarray]) -> np.ndarray:
        logits = super().predict_logits(images) + np.float32(self.logit_bias)
        check_outputs(logits, self.name, num_classes=self.label_space.num_classes)
        return logits


class HFClassifier(HFBase, Classifier):
    """``AutoModelForImageClassification`` (ViT, ConvNeXt, ... with an ImageNet or custom head)."""

    def __init__(self, source: str, device: str = "cpu", dtype: str = "float32", revision: str | None = None):
        import transformers

        self.name = f"hf:{source}"
        self._load(source, transformers.AutoModelForImageClassification, device, dtype, "AutoImageProcessor", revision)
        self.label_space = _label_space(self.module.config, f"hf:{source}")

    def predict_logits(self, images: Sequence[np.ndarray]) -> np.ndarray:
        import torch

        images = as_image_list(images)
        with torch.inference_mode():
            logits = self.module(**self._pixels(images)).logits.float().cpu().numpy()
        check_outputs(logits, self.name, num_classes=self.label_space.num_classes, batch_size=len(images))
        return logits


class HFDetector(HFBase, Detector):
    """``AutoModelForObjectDetection`` (DETR, Conditional/Deformable DETR, RT-DETR, YOLOS, ...)."""

    def __init__(self, source: str, device: str = "cpu", dtype: str = "float32", revision: str | None = None,
                 score_threshold: float = 0.05):
        import transformers

        self.name = f"hf:{source}"
        self._load(source, transformers.AutoModelForObjectDetection, device, dtype, "AutoImageProcessor", revision)
        self.label_space = _label_space(self.module.config, f"hf:{source}")
        self.score_threshold = float(score_threshold)

    def predict(self, images: Sequence[np.ndarray]) -> list[Detections]:
        import torch

        images = as_image_list(images)
        with torch.inference_mode():
            outputs = self.module(**self._pixels(images))
        sizes = [im.shape[:2] for im in images]
        results = self.processor.post_process_object_detection(
            outputs, threshold=self.score_threshold, target_sizes=sizes)
        out = []
        for (h, w), r in zip(sizes, results):
            boxes = r["boxes"].float().cpu().numpy().reshape(-1, 4)
            boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, w)
            boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, h)
            det = Detections(boxes, r["scores"].float().cpu().numpy(), r["labels"].cpu().numpy())
            out.append(det)
        check_outputs(out, self.name, batch_size=len(images))
        return out


class HFSegmenter(HFBase, Segmenter):
    """``AutoModelForSemanticSegmentation`` (SegFormer, UperNet, DPT, ...): class scores at input size."""

    def __init__(self, source: str, device: str = "cpu", dtype: str = "float32", revision: str | None = None):
        import transformers

        self.name = f"hf:{source}"
        self._load(source, transformers.AutoModelForSemanticSegmentation, device, dtype, "AutoImageProcessor", revision)
        self.label_space = _label_space(self.module.config, f"hf:{source}")

    def predict(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        import torch
        import torch.nn.functional as F

        images = as_image_list(images)
        with torch.inference_mode():
            logits = self.module(**self._pixels(images)).logits.float()
            out = [F.interpolate(logits[i:i + 1], size=im.shape[:2], mode="bilinear", align_corners=False)[0].cpu().numpy()
                   for i, im in enumerate(images)]
        check_outputs(out, self.name, batch_size=len(images))
        return out


class HFCaptioner(HFBase, Captioner):
    """Image-to-text generation (BLIP-2, BLIP, GIT): greedy decoding, ``max_new_tokens`` tokens at most."""

    def __init__(self, source: str, device: str = "cpu", dtype: str = "float32", revision: str | None = None,
                 max_new_tokens: int = 30, prompt: str | None = None):
        import transformers

        self.name = f"hf:{source}"
        loader = getattr(transformers, "AutoModelForImageTextToText", None) or transformers.AutoModelForVision2Seq
        config = transformers.AutoConfig.from_pretrained(source, **({"revision": revision} if revision else {}))
        if config.model_type in ("blip-2", "blip_2"):
            loader = transformers.Blip2ForConditionalGeneration
        self._load(source, loader, device, dtype, "AutoProcessor", revision)
        self.max_new_tokens = int(max_new_tokens)
        self.prompt = prompt

    def predict(self, images: Sequence[np.ndarray]) -> list[str]:
        import torch

        images = as_image_list(images)
        if self.prompt is not None:
            batch = self.processor(images=images, text=[self.prompt] * len(images), return_tensors="pt", padding=True)
        else:
            batch = self.processor(images=images, return_tensors="pt")
        inputs = {k: (v.to(self.device, self._torch_dtype) if v.is_floating_point() else v.to(self.device))
                  for k, v in batch.items() if hasattr(v, "to")}
        with torch.inference_mode():
            tokens = self.module.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
        texts = self.processor.batch_decode(tokens, skip_special_tokens=True)
        if self.prompt:
            texts = [t[len(self.prompt):] if t.startswith(self.prompt) else t for t in texts]
        return [t.strip() for t in texts]


def create(source: str, task: str | None = None, **kwargs: Any) -> Any:
    """Create the adapter for a transformers model folder or hub id; ``task`` overrides detection."""
    try:
        import transformers
    except ImportError:
        raise ShiftbenchError(f"hf: models need transformers: {install_command('gen')}") from None
    if not source:
        raise ShiftbenchError("hf: needs a hub id or a local folder, e.g. hf:openai/clip-vit-base-patch32")
    if task is None:
        revision = kwargs.get("revision")
        try:
            config = transformers.AutoConfig.from_pretrained(source, **({"revision": revision} if revision else {}))
        except (OSError, ValueError) as exc:
            raise ShiftbenchError(f"cannot load transformers config {source!r}: {str(exc).splitlines()[0]}") from None
        task = detect_task(config)
    from .vlm import HFImageTextToText  # here: vlm imports this module

    classes = {"zero_shot": HFZeroShotClassifier, "classification": HFClassifier, "detection": HFDetector,
               "segmentation": HFSegmenter, "captioning": HFCaptioner, "question_answering": HFImageTextToText}
    if task not in classes:
        raise ShiftbenchError(f"hf: unknown task {task!r}; choose one of {', '.join(classes)}")
    return classes[task](source, **kwargs)
