"""Metrics: stateful update/compute classes over pure functions (registered on import).

Classification (``top1``, ``top5``, ``ece``; ``shape_bias`` on a cue-conflict set), segmentation (``miou``,
``foreground_iou``), detection (``box_ap``, ``mask_ap``) and captioning (``text_similarity``, lazy: it loads sentence-transformers).
Robustness summaries are pure functions in :mod:`shiftbench.metrics.robustness`.

>>> from shiftbench.registry import METRICS
>>> m = METRICS.create("top1"); m.update([[0.1, 0.9]], [1]); m.compute()
{'top1': 1.0}
"""

from __future__ import annotations

from ..registry import METRICS, summary_line
from .base import Metric, OrderedMerge, check_task
from .classification import ECE, Top1, Top5, TopK
from .detection import BoxAP, MaskAP
from .segmentation import ForegroundIoU, MeanIoU
from .shape_bias import ShapeBias
from .answers import AnswerAccuracy, UnmatchedRate
from .stability import FlipProbability, Top5Distance

__all__ = ["Metric", "OrderedMerge", "check_task", "METRICS", "Top1", "Top5", "TopK", "ECE", "MeanIoU", "ForegroundIoU",
           "BoxAP", "MaskAP", "ShapeBias", "FlipProbability", "Top5Distance",
           "AnswerAccuracy", "UnmatchedRate"]

for _cls in (Top1, Top5, ECE, MeanIoU, ForegroundIoU, BoxAP, MaskAP, ShapeBias, FlipProbability, Top5Distance,
             AnswerAccuracy, UnmatchedRate):
    METRICS.add(_cls.name, _cls, description=summary_line(_cls.__doc__), task=_cls.task,
                higher_is_better=_cls.higher_is_better)
METRICS.add_lazy("text_similarity", "shiftbench.metrics.text:TextSimilarity",
                 description="mean cosine similarity of caption embeddings (MiniLM by default, CLIP text when given)",
                 task="captioning", higher_is_better=True)

# composed image retrieval (lazy only for symmetry: the module needs numpy alone)
for _name, _cls, _hib, _text in (
    ("recall", "Recall", True, "Recall@K over the gallery, K = 1, 5, 10, 50 (R@K)"),
    ("recall_subset", "RecallSubset", True, "Recall_subset@K within the query's subset, K = 1, 2, 3"),
    ("rank", "RankStats", False, "mean and median rank of the target"),
):
    METRICS.add_lazy(_name, f"shiftbench.metrics.retrieval:{_cls}", description=_text, task="retrieval",
                     higher_is_better=_hib)

# image quality of edited sets (Pascal-EA); lazy: the feature networks load onnx / torch
for _name, _cls, _desc, _hib in (
    ("lpips", "LPIPSStyle", "LPIPS-style perceptual distance of edited vs source images (pluggable features)", False),
    ("dino_distance", "DINODistance", "DINO-style feature distance (1 - cosine) of edited vs source images", False),
    ("fid", "FID", "Frechet distance of edited vs source feature distributions (exact)", False),
    ("clip_direction", "CLIPDirectional", "CLIP directional similarity and accuracy of edits (needs a CLIP model)", True),
):
    METRICS.add_lazy(_name, f"shiftbench.metrics.quality:{_cls}", description=_desc, task="quality",
                     higher_is_better=_hib)
