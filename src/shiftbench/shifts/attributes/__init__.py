"""Attribute shifts (Pascal-EA): colour, material, pattern, style edits that keep labels valid (registered on import).

Only light modules are imported here; the diffusion backend (torch, diffusers) loads on first use.
"""

from .edits import (
    AttributeColor, AttributeMaterial, AttributePattern, AttributeShift, AttributeStyle, edit_attribute,
    strength_of, variation_degree,
)

__all__ = ["AttributeShift", "AttributeColor", "AttributeMaterial", "AttributePattern", "AttributeStyle",
           "edit_attribute", "strength_of", "variation_degree"]
