"""ImageNet-C image corruptions (15 + 4 extras, severities 1..5), registered in SHIFTS on import.

>>> CORRUPTION_GROUPS["noise"]
['gaussian_noise', 'shot_noise', 'impulse_noise']
>>> len(CORRUPTION_GROUPS["all"]), len(COMMON_CORRUPTIONS)
(19, 15)
"""

from __future__ import annotations

from . import blur, digital, noise, weather  # noqa: F401  (registers the shifts)
from ._common import MIN_SIDE, Corruption

__all__ = ["CORRUPTION_GROUPS", "COMMON_CORRUPTIONS", "EXTRA_CORRUPTIONS", "Corruption", "MIN_SIDE", "corruption_names"]

# the ImageNet-C families in the reference order; "extra" are its four validation corruptions
CORRUPTION_GROUPS: dict[str, list[str]] = {
    "noise": ["gaussian_noise", "shot_noise", "impulse_noise"],
    "blur": ["defocus_blur", "glass_blur", "motion_blur", "zoom_blur"],
    "weather": ["snow", "frost", "fog", "brightness"],
    "digital": ["contrast", "elastic_transform", "pixelate", "jpeg_compression"],
    "extra": ["speckle_noise", "gaussian_blur", "spatter", "saturate"],
}
COMMON_CORRUPTIONS: list[str] = [n for g in ("noise", "blur", "weather", "digital") for n in CORRUPTION_GROUPS[g]]
EXTRA_CORRUPTIONS: list[str] = list(CORRUPTION_GROUPS["extra"])
CORRUPTION_GROUPS["common"] = list(COMMON_CORRUPTIONS)
CORRUPTION_GROUPS["all"] = COMMON_CORRUPTIONS + EXTRA_CORRUPTIONS


def corruption_names(name_or_group: str) -> list[str]:
    """The corruptions of a group ("all", "common", "noise", ...) or ``[name]`` for one corruption."""
    from ...errors import UnknownNameError
    from ...registry import SHIFTS

    if name_or_group in CORRUPTION_GROUPS:
        return list(CORRUPTION_GROUPS[name_or_group])
    if name_or_group in CORRUPTION_GROUPS["all"]:
        return [name_or_group]
    try:
        SHIFTS.entry(name_or_group)
    except UnknownNameError as exc:
        raise UnknownNameError(f"{exc} Corruption groups: {', '.join(CORRUPTION_GROUPS)}") from None
    raise UnknownNameError(f"{name_or_group!r} is a shift but not an image corruption")
