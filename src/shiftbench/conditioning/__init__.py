"""Conditioning for background shifts: object masks (providers, clean-up, dilation), captions, prompt sets."""

from .captions import Blip2Captioner, TemplateCaptioner, create_captioner
from .masks import (
    DEFAULT_DILATION, MASK_PROVIDERS, MaskProvider, MaskResult, check_object_mask, create_mask_provider, dilate,
    fill_holes, largest_component, mask_iou, mask_quality, postprocess,
)
from .prompts import prompt, prompt_names, prompt_sets, resolve_prompt

__all__ = [
    "DEFAULT_DILATION", "MASK_PROVIDERS", "MaskProvider", "MaskResult", "check_object_mask", "create_mask_provider",
    "dilate", "fill_holes", "largest_component", "mask_iou", "mask_quality", "postprocess", "prompt",
    "prompt_names", "prompt_sets", "resolve_prompt", "TemplateCaptioner", "Blip2Captioner", "create_captioner",
]
