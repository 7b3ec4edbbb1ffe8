"""Tiny random generative vision-language models (image-text-to-text) built from the libraries' real configs and
saved to folders (no downloads, no network): LLaVA (CLIP vision + Llama text), Idefics3 (SigLIP-style vision +
Llama text, image splitting), PaliGemma (SigLIP vision + Gemma text, no chat template) and Qwen2-VL. Each builder
writes model + processor (tokenizer made here from the ``tokenizers`` library, the family's image processor at
tiny sizes, a chat template written here where the family has one) so that ``sb.create_model("hf:" + folder)``
loads it as a question answerer."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

WORDS = ("a photo of the cat dog car red blue small large what is in this image how many colour answer yes no "
         "describe one two three question user assistant system you are helpful").split()
CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789.,:?!'\"-")
TEXT = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=512)
VISION = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4)

# chat templates written for these tests (Jinja): a message's content is a string or a list of typed parts
_PARTS = ("{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
          "{% if c['type'] == 'image' %}{IMAGE}{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
          "{% endfor %}{% endif %}")
# (transformers renders templates with trim_blocks: a newline right after a block tag is dropped, so "{{ '\\n' }}")
LLAVA_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}" + _PARTS.replace("{IMAGE}", "")
                  + "{{ '\\n' }}{% else %}{{ m['role'] | upper }}: " + _PARTS.replace("{IMAGE}", "<image>\n")
                  + "{{ '\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}")
IDEFICS3_TEMPLATE = ("<|im_start|>{% for m in messages %}{{ m['role'] | capitalize }}: "
                     + _PARTS.replace("{IMAGE}", "<image>") + "<end_of_utterance>\n{% endfor %}"
                     "{% if add_generation_prompt %}Assistant:{% endif %}")
QWEN2_VL_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                     + _PARTS.replace("{IMAGE}", "<|vision_start|><|image_pad|><|vision_end|>") + "<|im_end|>\n"
                     "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tokenizer(special: Sequence[str] = (), bos: str | None = "<bos>", words: Sequence[str] = ()):
    """A word-level fast tokenizer over WORDS, single characters and ``special`` (kept whole); ids 0-3 are
    <pad>/<unk>/<bos>/<eos>; ``bos`` (when set) is prepended to every text, as Llama/Gemma tokenizers do."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<pad>": 0, "<unk>": 1, "<bos>": 2, "<eos>": 3}
    for w in [*WORDS, *words, *CHARS]:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                           special_tokens=[(bos, vocab[bos])])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                                bos_token="<bos>", eos_token="<eos>", model_max_length=512)
    if special:
        fast.add_special_tokens({"additional_special_tokens": list(special)})
    return fast


def _text(tok, **extra) -> dict:
    return dict(TEXT, vocab_size=len(tok), bos_token_id=2, eos_token_id=3, pad_token_id=0, **extra)


def save_tiny_llava(folder: Path, seed: int = 0) -> Path:
    """LLaVA: CLIP vision (16 px, patch 8 -> 4 image tokens) + Llama text, "USER: <image>\\n... ASSISTANT:"."""
    import torch
    import transformers

    torch.manual_seed(seed)
    tok = tokenizer(["<image>"])
    vision = dict(VISION, model_type="clip_vision_model", image_size=16, patch_size=8, projection_dim=16)
    cfg = transformers.LlavaConfig(vision_config=vision, text_config=dict(_text(tok), model_type="llama"),
                                   image_token_index=tok.convert_tokens_to_ids("<image>"), image_seq_length=4,
                                   vision_feature_layer=-1)
    transformers.LlavaForConditionalGeneration(cfg).save_pretrained(folder)
    ip = transformers.CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})
    processor = transformers.LlavaProcessor(image_processor=ip, tokenizer=tok, patch_size=8,
                                            num_additional_image_tokens=1, vision_feature_select_strategy="default")
    processor.chat_template = LLAVA_TEMPLATE
    processor.save_pretrained(folder)
    return Path(folder)


def save_tiny_idefics3(folder: Path, seed: int = 0) -> Path:
    """Idefics3: vision 16 px, patch 4, pixel shuffle 2 (4 image tokens a tile); images split into tiles of 16 px
    (longest edge resized to 32) plus the global image, so images of other shapes give other token counts."""
    import torch
    import transformers

    torch.manual_seed(seed)
    tiles = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    tok = tokenizer(["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>", "<|im_start|>",
                     *tiles], words=["Assistant", "User", "System"])
    vision = dict(VISION, image_size=16, patch_size=4)
    cfg = transformers.Idefics3Config(vision_config=vision, text_config=dict(_text(tok), model_type="llama"),
                                      image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=2)
    transformers.Idefics3ForConditionalGeneration(cfg).save_pretrained(folder)
    ip = transformers.Idefics3ImageProcessor(size={"longest_edge": 32}, max_image_size={"longest_edge": 16},
                                             do_image_splitting=True)
    transformers.Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=4,
                                   chat_template=IDEFICS3_TEMPLATE).save_pretrained(folder)
    return Path(folder)


def save_tiny_paligemma(folder: Path, seed: int = 0) -> Path:
    """PaliGemma: SigLIP vision (16 px, patch 8 -> 4 image tokens) + Gemma text; no chat template (the processor
    puts the image tokens and <bos> before the prompt and a newline after it)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    tok = tokenizer(["<image>"], bos=None)
    vision = dict(VISION, model_type="siglip_vision_model", image_size=16, patch_size=8, projection_dim=32)
    text = dict(_text(tok), model_type="gemma", head_dim=8)
    cfg = transformers.PaliGemmaConfig(vision_config=vision, text_config=text, vocab_size=len(tok),
                                       image_token_index=tok.convert_tokens_to_ids("<image>"), projection_dim=32,
                                       hidden_size=32)
    transformers.PaliGemmaForConditionalGeneration(cfg).save_pretrained(folder)
    ip = transformers.SiglipImageProcessor(size={"height": 16, "width": 16})
    ip.image_seq_length = 4
    transformers.PaliGemmaProcessor(image_processor=ip, tokenizer=tok).save_pretrained(folder)
    return Path(folder)


def save_tiny_qwen2_vl(folder: Path, seed: int = 0) -> Path:
    """Qwen2-VL: native-resolution vision (patch 4, merge 2; images resized to 16-32 px multiples of 8, so
    other shapes give other token counts) + Qwen2 text with multimodal rotary positions."""
    import torch
    import transformers

    torch.manual_seed(seed)
    special = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tok = tokenizer(special, bos=None, words=["system", "user", "assistant"])
    ids = {t: tok.convert_tokens_to_ids(t) for t in special}
    vision = dict(depth=1, embed_dim=32, hidden_size=32, num_heads=4, mlp_ratio=2, patch_size=4, spatial_merge_size=2,
                  temporal_patch_size=2, in_channels=3)
    # multimodal rotary sections (temporal, height, width) sum to head_dim / 2 = 4
    text = dict(_text(tok), model_type="qwen2_vl_text",
                rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 10000.0})
    cfg = transformers.Qwen2VLConfig(vision_config=vision, text_config=text, image_token_id=ids["<|image_pad|>"],
                                     video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                                     vision_end_token_id=ids["<|vision_end|>"])
    transformers.Qwen2VLForConditionalGeneration(cfg).save_pretrained(folder)
    ip = transformers.Qwen2VLImageProcessor(patch_size=4, merge_size=2, temporal_patch_size=2,
                                            min_pixels=16 * 16, max_pixels=32 * 32)
    vp = transformers.Qwen2VLVideoProcessor(patch_size=4, merge_size=2, temporal_patch_size=2,
                                            min_pixels=16 * 16, max_pixels=32 * 32)
    transformers.Qwen2VLProcessor(image_processor=ip, tokenizer=tok, video_processor=vp,
                                  chat_template=QWEN2_VL_TEMPLATE).save_pretrained(folder)
    return Path(folder)


TINY_VLMS: dict[str, Callable[[Path], Path]] = {
    "llava": save_tiny_llava, "idefics3": save_tiny_idefics3, "paligemma": save_tiny_paligemma,
    "qwen2_vl": save_tiny_qwen2_vl,
}
