"""Shift groups: the names that select several shifts, in specs and in ``generate --shift``.

The corruption groups (``all``: ImageNet-C's 19, ``common``: its 15, ``noise``, ``blur``, ``weather``,
``digital``, ``extra``) and every ``group=`` a shift is registered with (``cbar``: ImageNet-C-bar's ten,
``text``, ``background``, ``attribute``). A shift's own name is never a group.
"""

from __future__ import annotations

from ..registry import SHIFTS, family_members
from . import corruptions

__all__ = ["group_members"]


def group_members(name: str) -> list[str] | None:
    """The shifts the group ``name`` selects, in registration order; None when ``name`` is no group."""
    if name in SHIFTS:
        return None
    groups = corruptions.CORRUPTION_GROUPS  # built from the registry on first use
    if name in groups:
        return list(groups[name])
    members = family_members(name)
    if name == "cbar":  # in the published table's order (the registry's is its files' import order)
        from .cbar import CBAR_CORRUPTIONS  # deferred: start-up cost (pulls cv2, scipy)

        members = sorted(members, key=lambda m: CBAR_CORRUPTIONS.index(m) if m in CBAR_CORRUPTIONS else len(members))
    if name in ("imagenet_p", "imagenet_p_extra"):  # the paper's order, as cbar's
        from .perturbations import IMAGENET_P, IMAGENET_P_EXTRA

        order = IMAGENET_P if name == "imagenet_p" else IMAGENET_P_EXTRA
        members = sorted(members, key=lambda m: order.index(m) if m in order else len(order))
    return members or None
