"""The reference ImageNet-C code (imagecorruptions 1.1.2) made importable on today's stacks, in one place.

imagecorruptions breaks on numpy 2 (``np.float_`` in fog), scikit-image >= 0.20 (``multichannel=``
in glass_blur / gaussian_blur / spatter) and setuptools >= 82 (``pkg_resources`` for the frost
files). The shims below are the smallest that make it run; they touch nothing outside the
reference module except adding the ``np.float_`` alias numpy 1 had.

Used by tests/shifts/test_corruptions_reference.py and benchmarks/corruptions.py; ``reference_corrupt``
is also the helper to produce the reference output of an image for any corruption and severity.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np

_MODULE = None


def reference_available() -> bool:
    """True when imagecorruptions and its own dependencies (scikit-image, scipy) are installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("imagecorruptions", "skimage", "scipy"))


def _install_pkg_resources_stand_in() -> None:
    # imagecorruptions only calls pkg_resources.resource_filename(__name__, "./frost/...")
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pkg_resources  # noqa: F401
        return
    except ImportError:
        pass
    stand_in = types.ModuleType("pkg_resources")

    def resource_filename(package: str, resource: str) -> str:
        spec = importlib.util.find_spec(package)
        return str(Path(spec.origin).parent / resource)

    stand_in.resource_filename = resource_filename
    sys.modules["pkg_resources"] = stand_in


def reference_module():
    """``imagecorruptions.corruptions`` with the compatibility shims applied (imported once)."""
    global _MODULE
    if _MODULE is not None:
        return _MODULE
    if not hasattr(np, "float_"):
        np.float_ = np.float64  # removed in numpy 2; fog's plasma_fractal uses it
    _install_pkg_resources_stand_in()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import imagecorruptions.corruptions as module
    from skimage.filters import gaussian as skimage_gaussian

    @functools.wraps(skimage_gaussian)
    def gaussian(image, *args, multichannel=None, **kwargs):
        if multichannel is not None:  # removed in scikit-image 0.20
            kwargs.setdefault("channel_axis", -1 if multichannel else None)
        return skimage_gaussian(image, *args, **kwargs)

    module.gaussian = gaussian
    _MODULE = module
    return module


def reference_corrupt(image: np.ndarray, name: str, severity: int, seed: int | None = 0) -> np.ndarray:
    """The reference output (uint8 HxWx3) of corruption ``name`` at ``severity`` for an RGB uint8 image.

    ``seed`` seeds numpy's global generator, which the reference draws from (impulse_noise draws
    from scikit-image's own unseeded generator and stays random).
    """
    module = reference_module()
    from PIL import Image

    if seed is not None:
        np.random.seed(seed)
    func = getattr(module, name)
    with np.errstate(all="ignore"):
        out = func(Image.fromarray(image), severity)
    return np.uint8(out)
