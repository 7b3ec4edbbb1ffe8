"""Generative vision-language models (``hf:`` image-text-to-text) on tiny random models of four families built
in the test (tests/tiny_vlm.py: LLaVA, Idefics3, PaliGemma, Qwen2-VL; no downloads).

Each answers through ``sb.create_model("hf:" + folder)`` and is compared with the same model driven directly
through transformers: one answer per (image, prompt), greedy and deterministic, a batch equal to its items one
by one (left padding), only the new tokens decoded.
"""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.models.base import Answerer
from shiftbench.models.hf import VLM_TYPES, detect_task

import tiny_hub
import tiny_vlm

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from shiftbench.models.vlm import DEFAULT_GENERATION, HFImageTextToText  # noqa: E402

PROMPTS = ["what is in this image?", "how many cat are in the photo?", "describe"]
FAMILIES = sorted(tiny_vlm.TINY_VLMS)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm")
    return {name: build(root / name) for name, build in tiny_vlm.TINY_VLMS.items()}


@pytest.fixture(scope="module")
def models(folders):
    return {name: sb.create_model(f"hf:{folder}", max_new_tokens=6) for name, folder in folders.items()}


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    # a wide, a tall and a square image: tile counts and token counts differ in Idefics3 and Qwen2-VL
    return [rng.integers(0, 256, shape, dtype=np.uint8) for shape in [(12, 40, 3), (48, 20, 3), (32, 32, 3)]]


def _reference(folder, images, prompts, max_new_tokens):
    """The same model through transformers alone: greedy, left padded, new tokens only."""
    model = transformers.AutoModelForImageTextToText.from_pretrained(folder).eval()
    proc = transformers.AutoProcessor.from_pretrained(folder)
    proc.tokenizer.padding_side = "left"
    if proc.chat_template:
        turns = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": p}]}] for p in prompts]
        texts = [proc.apply_chat_template(t, add_generation_prompt=True, tokenize=False) for t in turns]
    else:
        texts = list(prompts)
    batch = proc(images=images, text=texts, return_tensors="pt", padding=True)
    batch.pop("labels", None)
    with torch.no_grad():
        tokens = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                                pad_token_id=proc.tokenizer.pad_token_id)
    new = tokens[:, batch["input_ids"].shape[1]:]
    return new, [t.strip() for t in proc.tokenizer.batch_decode(new, skip_special_tokens=True)], batch


@pytest.mark.parametrize("family", FAMILIES)
def test_detected_and_identity(family, folders, models):
    model = models[family]
    config = transformers.AutoConfig.from_pretrained(folders[family])
    assert config.model_type in VLM_TYPES and detect_task(config) == "question_answering"
    assert isinstance(model, HFImageTextToText) and isinstance(model, Answerer) and model.kind == "answerer"
    assert model.task == "question_answering" and model.label_space is None
    assert model.name == f"hf:{folders[family]}" and model.device == "cpu" and model.dtype == "float32"
    assert model.generation == {**DEFAULT_GENERATION, "max_new_tokens": 6}
    assert DEFAULT_GENERATION == {"max_new_tokens": 16, "do_sample": False, "num_beams": 1}
    info = model.info()
    assert info["generation"] == model.generation and info["task"] == "question_answering" and info["system"] is None
    assert model.weight_files() and all(f.endswith(".safetensors") for f in model.weight_files())


@pytest.mark.parametrize("family", FAMILIES)
def test_answers_match_transformers_and_are_deterministic(family, folders, models, images):
    model = models[family]
    answers = model.answer(images, PROMPTS)
    assert isinstance(answers, list) and len(answers) == 3 and all(isinstance(a, str) for a in answers)
    assert answers == [a.strip() for a in answers]
    assert model.answer(images, PROMPTS) == answers  # greedy: the same call, the same answers
    new, ref, batch = _reference(folders[family], images, PROMPTS, 6)
    assert answers == ref
    # only the new tokens are decoded: each token of the tiny vocabulary decodes to one word, so an answer has at
    # most 6 words, while the second prompt alone has 8 (and the template adds more)
    assert 1 <= new.shape[1] <= 6 and batch["input_ids"].shape[1] > new.shape[1]
    assert len(PROMPTS[1].replace("?", " ?").split()) == 8
    assert all(len(a.split()) <= 6 for a in answers)


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_equals_items_one_by_one(family, models, images):
    model = models[family]
    together = model.answer(images, PROMPTS)
    assert together == [model.answer([im], [p])[0] for im, p in zip(images, PROMPTS)]
    # prompts of very different lengths in one batch: the short ones are left padded
    prompts = ["a", "what is in this image ? describe the red cat and the blue dog , yes or no ?", "how many"]
    assert model.answer(images, prompts) == [model.answer([im], [p])[0] for im, p in zip(images, prompts)]


@pytest.mark.parametrize("family", FAMILIES)
def test_prompt_text_follows_the_template(family, models):
    model = models[family]
    text = model.prompt_text("what is in this image?")
    if family == "paligemma":  # no chat template: the processor adds the image tokens itself
        assert text == "what is in this image?"
    else:
        assert text.rstrip().endswith(("ASSISTANT:", "Assistant:", "assistant"))
        assert text.index("what is in this image?") > 0


def test_system_prompt_goes_first(folders, images):
    model = sb.create_model(f"hf:{folders['llava']}", max_new_tokens=3, system="you are helpful")
    assert model.system == "you are helpful" and model.info()["system"] == "you are helpful"
    text = model.prompt_text("describe")
    assert text.startswith("you are helpful\n") and text.index("describe") > text.index("you are helpful")
    assert len(model.answer(images[:2], ["describe", "yes or no ?"])) == 2


def test_images_as_one_array_and_empty_batch(models, images):
    model = models["llava"]
    stacked = np.stack([images[2], images[2]])
    assert model.answer(stacked, PROMPTS[:2]) == model.answer([images[2], images[2]], PROMPTS[:2])
    assert model.answer([], []) == []


def test_bad_inputs_are_one_line_errors(folders, models, images, tmp_path):
    model = models["llava"]
    with pytest.raises(ShiftbenchError, match="3 images but 2 prompts"):
        model.answer(images, PROMPTS[:2])
    with pytest.raises(ShiftbenchError, match="max_new_tokens"):
        sb.create_model(f"hf:{folders['llava']}", max_new_tokens=0)
    for source in (tmp_path / "missing", tmp_path):
        with pytest.raises(ShiftbenchError, match="cannot load") as err:
            sb.create_model(f"hf:{source}")
        assert "\n" not in str(err.value)
        with pytest.raises(ShiftbenchError, match="cannot load") as err:
            sb.create_model(f"hf:{source}", task="question_answering")
        assert "\n" not in str(err.value)


def test_non_vlm_folders_are_not_question_answering(tmp_path):
    clip = tiny_hub.save_tiny_clip(tmp_path / "clip")
    blip2 = tiny_hub.save_tiny_blip2(tmp_path / "blip2")
    assert detect_task(transformers.AutoConfig.from_pretrained(clip)) == "zero_shot"
    assert detect_task(transformers.AutoConfig.from_pretrained(blip2)) == "captioning"
    assert sb.create_model(f"hf:{blip2}", max_new_tokens=2).task == "captioning"
    with pytest.raises(ShiftbenchError, match="not an image-text-to-text model") as err:
        sb.create_model(f"hf:{clip}", task="question_answering")
    assert "\n" not in str(err.value)
