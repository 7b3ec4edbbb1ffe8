"""Why a model fails, for users: Grad-CAM, background reliance and feature embeddings.

The public names of the analysis views, re-exported from the engine's analysis step
(:mod:`shiftbench.engine.analysis`, which also computes a spec's ``analysis:`` section during a run):
``gradcam``, ``occlusion_map``, ``outside_share``, ``penultimate_features``, ``embed_2d``,
``bootstrap_mean``, and what a run stores (``stored_analysis``, ``ANALYSIS_PREFIX``, ``ANALYSIS_VIEWS``).
"""

from __future__ import annotations

from .engine.analysis import (ANALYSIS_PREFIX, ANALYSIS_VIEWS, bootstrap_mean, embed_2d, gradcam, occlusion_map,
                              outside_share, penultimate_features, run_analysis, stored_analysis, supports_analysis)

__all__ = ["gradcam", "occlusion_map", "outside_share", "penultimate_features", "embed_2d", "run_analysis",
           "bootstrap_mean", "ANALYSIS_VIEWS", "ANALYSIS_PREFIX", "stored_analysis", "supports_analysis"]
