"""Generative vision-language models (transformers image-text-to-text: LLaVA, Idefics3/SmolVLM, PaliGemma,
Qwen2-VL, Gemma 3, ...) asked one question per image: ``answer(images, prompts) -> list[str]``.

Each prompt goes through the processor's chat template as one user turn (an image, then the text; a system turn
first when ``system`` is set); a processor without a chat template (PaliGemma) gets the prompt as it is and puts
the image tokens in itself. A batch is one greedy ``generate`` call on left-padded inputs; only the new tokens are
decoded. ``generation`` holds the decoding settings for the run's identity. Loads from a local folder or the
Hugging Face cache (``HF_HUB_OFFLINE=1`` forbids downloads).

>>> DEFAULT_GENERATION
{'max_new_tokens': 16, 'do_sample': False, 'num_beams': 1}
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from .base import Answerer, as_image_list, check_outputs
from .hf_base import HFBase

__all__ = ["HFImageTextToText", "DEFAULT_GENERATION"]

DEFAULT_GENERATION = {"max_new_tokens": 16, "do_sample": False, "num_beams": 1}


def _check_image_text_to_text(source: str, revision: str | None) -> None:
    """Raise a one-line ShiftbenchError unless ``source`` holds a transformers image-text-to-text model."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    try:
        config = transformers.AutoConfig.from_pretrained(source, **({"revision": revision} if revision else {}))
    except (OSError, ValueError) as exc:
        raise ShiftbenchError(f"cannot load transformers config {source!r}: {str(exc).splitlines()[0]}") from None
    model_type = getattr(config, "model_type", "")
    if model_type not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        raise ShiftbenchError(f"hf:{source} is not an image-text-to-text model (model_type {model_type!r}); "
                              "question_answering needs one such as LLaVA, Idefics3, PaliGemma or Qwen2-VL")


class HFImageTextToText(HFBase, Answerer):
    """``AutoModelForImageTextToText`` + ``AutoProcessor``: one greedy answer per (image, prompt) pair."""

    def __init__(self, source: str, device: str = "cpu", dtype: str = "float32", revision: str | None = None,
                 max_new_tokens: int = 16, system: str | None = None):
        import transformers

        if int(max_new_tokens) < 1:
            raise ShiftbenchError(f"hf:{source}: max_new_tokens must be at least 1, got {max_new_tokens!r}")
        self.name = f"hf:{source}"
        _check_image_text_to_text(source, revision)
        try:
            self._load(source, transformers.AutoModelForImageTextToText, device, dtype, "AutoProcessor", revision)
        except ValueError as exc:
            raise ShiftbenchError(f"cannot load transformers model {source!r}: {str(exc).splitlines()[0]}") from None
        self.tokenizer = getattr(self.processor, "tokenizer", None)
        if self.tokenizer is None:
            raise ShiftbenchError(f"hf:{source}: the processor has no tokenizer; cannot ask the model questions")
        self.tokenizer.padding_side = "left"  # decoder-only: new tokens follow every prompt's last token
        self.system = system
        self.generation = dict(DEFAULT_GENERATION, max_new_tokens=int(max_new_tokens))

    def info(self) -> dict[str, Any]:
        return {**super().info(), "generation": dict(self.generation), "system": self.system}

    def prompt_text(self, prompt: str) -> str:
        """The text the processor gets for ``prompt``: the chat template's user turn (image then text) ending in
        the assistant's generation prompt, or the prompt itself for a processor without a template."""
        if not getattr(self.processor, "chat_template", None):
            return prompt
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        if self.system is not None:
            messages.insert(0, {"role": "system", "content": [{"type": "text", "text": self.system}]})
        return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def answer(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[str]:
        """One stripped answer per (image, prompt) pair, all in one greedy ``generate`` call."""
        import torch

        images = as_image_list(images)
        prompts = [str(p) for p in prompts]
        if len(images) != len(prompts):
            raise ShiftbenchError(f"model {self.name!r}: {len(images)} images but {len(prompts)} prompts")
        if not images:
            return []
        batch = self.processor(images=images, text=[self.prompt_text(p) for p in prompts], return_tensors="pt",
                               padding=True)
        inputs = {k: (v.to(self.device, self._torch_dtype) if v.is_floating_point() else v.to(self.device))
                  for k, v in batch.items() if hasattr(v, "to") and k != "labels"}
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with torch.inference_mode():
            tokens = self.module.generate(**inputs, **self.generation, pad_token_id=pad)
        new = tokens[:, inputs["input_ids"].shape[1]:]  # generate returns the prompt, then the new tokens
        out = [t.strip() for t in self.tokenizer.batch_decode(new, skip_special_tokens=True)]
        check_outputs(out, self.name, batch_size=len(prompts))
        return out
