"""Shift groups: the names that select several shifts, in specs and in ``generate --shift``.

The corruption groups (``all``: ImageNet-C's 19, ``common``: its 15, ``noise``, ``blur``, ``weather``,
``digital``, ``extra``) and every ``group=`` a shift is registered with (``cbar``: ImageNet-C-bar's ten,
``text``, ``background``, ``attribute``). A shift's own name is never a group.
"""

from __future__ import annotations

from ..registry import SHIFTS

__all__ = ["group_members"]


def group_members(name: str) -> list[str] | None:
    """The shifts the group ``name`` selects, in registration order; None when ``name`` is no group."""
    from .corruptions import CORRUPTION_GROUPS

    if name in SHIFTS:
        return None
    if name in CORRUPTION_GROUPS:
        return list(CORRUPTION_GROUPS[name])
    members = [e.name for e in SHIFTS.entries() if e.meta.get("group") == name]
    if name == "cbar":  # in the published table's order (the registry's is its files' import order)
        from .cbar import CBAR_CORRUPTIONS

        members = sorted(members, key=lambda m: CBAR_CORRUPTIONS.index(m) if m in CBAR_CORRUPTIONS else len(members))
    return members or None
