"""ImageNet-C-bar's ten corruptions (Mintun et al., NeurIPS 2021), severities 1..5, group ``cbar``.

Registered in SHIFTS on import, each in its family's file; ``CBAR_CORRUPTIONS`` lists them in the
published table's order (``data/cbar/imagenet_c_bar.csv``).
"""

from __future__ import annotations

from . import caustic, checkerboard, noise, sparkles, waves  # noqa: F401  (registers the shifts)
from ._base import LEVELS, CBarCorruption

__all__ = ["CBAR_CORRUPTIONS", "CBarCorruption", "LEVELS"]

CBAR_CORRUPTIONS: tuple[str, ...] = tuple(LEVELS)
