"""ImageNet-C image corruptions (15 + 4 extras, severities 1..5), registered in SHIFTS on import.

A corruption's group is the ``group=`` of its ``SHIFTS.register`` and is written nowhere else: the
group lists here are read from the registry on first use (reading it at import would load every
shift family while this one is still loading).

>>> from shiftbench.shifts.corruptions import COMMON_CORRUPTIONS, CORRUPTION_GROUPS
>>> CORRUPTION_GROUPS["noise"]
['gaussian_noise', 'shot_noise', 'impulse_noise']
>>> len(CORRUPTION_GROUPS["all"]), len(COMMON_CORRUPTIONS)
(19, 15)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ...errors import UnknownNameError
from ...registry import SHIFTS
from . import blur, digital, noise, weather  # noqa: F401  (registers the shifts)
from ._common import MIN_SIDE, Corruption

__all__ = [
    "CORRUPTION_GROUPS", "COMMON_CORRUPTIONS", "EXTRA_CORRUPTIONS", "FAMILIES", "GROUP_ORDER", "Corruption", "MIN_SIDE",
    "corruption_names",
]

# ImageNet-C's families in its order. Each family's file is named after it and defines its corruptions in
# the reference order, its own first and then its extra (one of ImageNet-C's four validation corruptions).
_FAMILY_FILES = (noise, blur, weather, digital)
FAMILIES: tuple[str, ...] = tuple(f.__name__.rpartition(".")[2] for f in _FAMILY_FILES)
GROUP_ORDER: tuple[str, ...] = (*FAMILIES, "extra")  # the corruption groups, as reports order them
_DERIVED = ("CORRUPTION_GROUPS", "COMMON_CORRUPTIONS", "EXTRA_CORRUPTIONS")


@lru_cache(maxsize=None)
def _group_lists() -> dict[str, Any]:
    """The registered corruptions by group (GROUP_ORDER, then "common" and "all"), in their files' order."""
    registered = {e.target: e for e in SHIFTS.entries() if isinstance(e.target, type) and issubclass(e.target, Corruption)}
    groups: dict[str, list[str]] = {g: [] for g in GROUP_ORDER}
    for file in _FAMILY_FILES:
        for obj in vars(file).values():  # a module's names in the order its code binds them
            entry = registered.get(obj) if isinstance(obj, type) else None
            if entry is not None:
                groups.setdefault(str(entry.info.family), []).append(entry.name)
    every = [name for names in groups.values() for name in names]
    common = [name for family in FAMILIES for name in groups[family]]
    groups["common"] = list(common)
    groups["all"] = every
    return {"CORRUPTION_GROUPS": groups, "COMMON_CORRUPTIONS": common, "EXTRA_CORRUPTIONS": list(groups["extra"])}


def __getattr__(name: str) -> Any:
    # CORRUPTION_GROUPS, COMMON_CORRUPTIONS, EXTRA_CORRUPTIONS: built from the registry when first asked for
    if name in _DERIVED:
        return _group_lists()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def corruption_names(name_or_group: str) -> list[str]:
    """The corruptions of a group ("all", "common", "noise", ...) or ``[name]`` for one corruption."""
    groups = _group_lists()["CORRUPTION_GROUPS"]
    if name_or_group in groups:
        return list(groups[name_or_group])
    if name_or_group in groups["all"]:
        return [name_or_group]
    try:
        SHIFTS.entry(name_or_group)
    except UnknownNameError as exc:
        raise UnknownNameError(f"{exc} Corruption groups: {', '.join(groups)}") from None
    raise UnknownNameError(f"{name_or_group!r} is a shift but not an image corruption")
