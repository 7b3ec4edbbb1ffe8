"""Shifts: registered, seeded, replayable transforms of samples (see shifts.base)."""

from .base import ImageShift, Shift, TextShift, derive_seed, make_rng

__all__ = ["Shift", "ImageShift", "TextShift", "make_rng", "derive_seed"]
