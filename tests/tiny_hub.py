"""Tiny random models built from the libraries' real configs and saved to files or folders (no downloads), shared
by the adapter tests and the end-to-end tests: CLIP, SigLIP, DETR, SegFormer, BLIP-2 (transformers; each
``save_*`` writes a folder that ``sb.create_model("hf:" + folder)`` loads), a timm test network
(``timm:FOLDER``), an open_clip CLIP (``open_clip:ARCH//FILE`` or ``open_clip:FOLDER``) and a torchvision
ResNet-18 (``torchvision:resnet18//FILE``)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

WORDS = "a photo of the cat dog car red blue small large bad many sculpture itap origami".split()

TEXT = dict(vocab_size=32, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=16, bos_token_id=2, eos_token_id=3, pad_token_id=0)
VISION = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
              num_attention_heads=4)


def tokenizer(with_eos: bool = True, extra: tuple[str, ...] = ()):
    """A word-level fast tokenizer over WORDS (unknown words map to [UNK]); ids 0/1/2/3 are pad/unk/bos/eos."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[PAD]": 0, "[UNK]": 1, "[BOS]": 2, "[EOS]": 3}
    for w in WORDS + [".", ","]:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    single = "[BOS] $A [EOS]" if with_eos else "[BOS] $A"
    tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=[("[BOS]", 2), ("[EOS]", 3)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                                bos_token="[BOS]", eos_token="[EOS]", model_max_length=16)
    if extra:
        fast.add_special_tokens({"additional_special_tokens": list(extra)})
    return fast


def save_tiny_clip(folder: Path, seed: int = 0) -> Path:
    """CLIP: shortest edge 40, centre crop 32."""
    import torch
    import transformers

    torch.manual_seed(seed)
    transformers.CLIPModel(transformers.CLIPConfig(text_config=TEXT, vision_config=VISION, projection_dim=16)).save_pretrained(folder)
    transformers.CLIPImageProcessor(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    tokenizer().save_pretrained(folder)
    return Path(folder)


def save_tiny_siglip(folder: Path, seed: int = 0) -> Path:
    """SigLIP: squash to 32x32, mean/std 0.5, logit bias -2.5."""
    import torch
    import transformers

    torch.manual_seed(seed)
    model = transformers.SiglipModel(transformers.SiglipConfig(text_config=TEXT, vision_config=VISION))
    with torch.no_grad():
        model.logit_bias.fill_(-2.5)
    model.save_pretrained(folder)
    transformers.SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    tokenizer().save_pretrained(folder)
    return Path(folder)


def save_tiny_detr(folder: Path, id2label: dict[int, str] | Sequence[str] = ("cat", "dog", "car"), num_queries: int = 6,
                   seed: int = 0) -> Path:
    """DETR with a transformers ResNet backbone (no timm); ``id2label`` as in a hub config."""
    import torch
    import transformers

    torch.manual_seed(seed)
    if not isinstance(id2label, dict):
        id2label = dict(enumerate(id2label))
    # hub DETR configs list every slot up to the largest category id, gaps named "N/A" (COCO's 91 slots)
    id2label = {i: id2label.get(i, "N/A") for i in range(max(id2label) + 1)}
    backbone = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                         out_features=["stage1", "stage2"])
    cfg = transformers.DetrConfig(
        use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False, d_model=16,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=16, decoder_ffn_dim=16, num_queries=num_queries, num_labels=len(id2label),
        id2label={int(k): v for k, v in id2label.items()}, label2id={v: int(k) for k, v in id2label.items()})
    transformers.DetrForObjectDetection(cfg).save_pretrained(folder)
    transformers.DetrImageProcessor(size={"shortest_edge": 32, "longest_edge": 64}).save_pretrained(folder)
    return Path(folder)


def save_tiny_segformer(folder: Path, num_labels: int = 4, id2label: dict[int, str] | Sequence[str] | None = None,
                        seed: int = 0) -> Path:
    """A SegFormer semantic segmenter (input squashed to 32x32)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    extra = {}
    if id2label is not None:
        if not isinstance(id2label, dict):
            id2label = dict(enumerate(id2label))
        num_labels = len(id2label)
        extra = dict(id2label={int(k): v for k, v in id2label.items()}, label2id={v: int(k) for k, v in id2label.items()})
    cfg = transformers.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                                       patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                                       decoder_hidden_size=16, num_labels=num_labels, **extra)
    transformers.SegformerForSemanticSegmentation(cfg).save_pretrained(folder)
    transformers.SegformerImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return Path(folder)


def save_tiny_blip2(folder: Path, tok=None, seed: int = 0) -> Path:
    """A tiny random BLIP-2 (ViT 32 px, one layer each, OPT decoder) with its processor.

    ``tok`` must hold an ``<image>`` token; ids 0/2/3 are pad/bos/eos (default: WORDS' tokenizer).
    """
    import torch
    import transformers

    torch.manual_seed(seed)
    tok = tok if tok is not None else tokenizer(with_eos=False, extra=("<image>",))
    vision = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                  num_attention_heads=4)
    cfg = transformers.Blip2Config(
        vision_config=vision,
        qformer_config=dict(vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                            intermediate_size=37, encoder_hidden_size=32),
        text_config=dict(model_type="opt", vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                         ffn_dim=37, num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32,
                         bos_token_id=2, eos_token_id=3, pad_token_id=0),
        num_query_tokens=4, image_token_index=tok.convert_tokens_to_ids("<image>"))
    transformers.Blip2ForConditionalGeneration(cfg).save_pretrained(folder)
    transformers.Blip2Processor(image_processor=transformers.BlipImageProcessor(size={"height": 32, "width": 32}),
                                tokenizer=tok, num_query_tokens=4).save_pretrained(folder)
    return Path(folder)


TIMM_ARCH = "test_resnet"  # timm's own tiny test network (0.47M parameters, 160 px, tag r160_in1k)
OPEN_CLIP_ARCH = "shiftbench-tiny-clip"  # registered with open_clip by save_tiny_open_clip
OPEN_CLIP_CONFIG = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "mlp_ratio": 2.0, "patch_size": 8},
    # open_clip's own BPE tokenizer (SimpleTokenizer) needs its 49,408-token vocabulary; 16 tokens of context
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
# what the local folder's open_clip_config.json declares (a registered architecture gets open_clip's defaults)
OPEN_CLIP_PREPROCESS = {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "interpolation": "bilinear",
                        "resize_mode": "shortest"}


def save_tiny_timm(folder: Path, seed: int = 0, arch: str = TIMM_ARCH, label_names: Sequence[str] | None = None,
                   **model_kwargs) -> Path:
    """A real timm model built from its registered config with ``pretrained=False`` (random init under ``seed``),
    saved as timm's hub folders are (``save_for_hf``: ``config.json`` with the pretrained config and any
    ``label_names``, and ``model.safetensors``); ``timm:FOLDER`` loads it. ``model_kwargs`` go to
    ``timm.create_model`` (``num_classes=3`` for another head)."""
    import timm
    import torch
    from timm.models import save_for_hf

    torch.manual_seed(seed)
    model = timm.create_model(arch, pretrained=False, **model_kwargs)
    config = {"label_names": list(label_names)} if label_names is not None else None
    save_for_hf(model, str(folder), model_config=config, safe_serialization=True)
    return Path(folder)


def save_tiny_open_clip(folder: Path, seed: int = 0) -> tuple[str, Path]:
    """A real open_clip CLIP (ViT 32 px, one layer per tower) at random init under ``seed``, from a tiny config
    registered with open_clip (``open_clip.add_model_config``): returns (architecture, weights file) for
    ``open_clip:ARCH//FILE``. The folder is also an open_clip local folder (``open_clip_config.json`` with the
    model and preprocess configs, ``open_clip_model.safetensors``): ``open_clip:FOLDER`` loads it, in any process,
    with no registration."""
    import json

    import open_clip
    import torch
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / f"{OPEN_CLIP_ARCH}.json"
    config.write_text(json.dumps(OPEN_CLIP_CONFIG))
    open_clip.add_model_config(config)
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": OPEN_CLIP_CONFIG,
                                                              "preprocess_cfg": OPEN_CLIP_PREPROCESS}))
    torch.manual_seed(seed)
    model = open_clip.create_model(OPEN_CLIP_ARCH, pretrained=None)
    weights = folder / "open_clip_model.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    return OPEN_CLIP_ARCH, weights


def save_tiny_torchvision(path: Path, seed: int = 0, arch: str = "resnet18", num_classes: int = 1000) -> Path:
    """A real torchvision classifier at random init under ``seed``, its state dict saved to ``path``
    (``.safetensors``, else ``torch.save``); ``torchvision:ARCH//PATH`` loads it."""
    import torch
    import torchvision

    torch.manual_seed(seed)
    state = torchvision.models.get_model(arch, weights=None, num_classes=num_classes).state_dict()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        torch.save(state, path)
    return path


class PixelFeatures:
    """The tiniest feature network for the quality metrics (no weights): colour maps at two scales, embedding
    = colour mean and std per channel. ``delay`` seconds of sleep per call let a test kill a run inside
    its quality step."""

    name = "pixel_features"
    task = "features"
    delay = 0.0
    calls = 0

    def features(self, images):
        import time

        from shiftbench.models.features import Features

        type(self).calls += 1
        if self.delay:
            time.sleep(self.delay)
        x = np.stack([np.asarray(im) for im in images]).astype(np.float64).transpose(0, 3, 1, 2) / 255.0
        emb = np.concatenate([x.mean(axis=(2, 3)), x.std(axis=(2, 3))], axis=1)
        return Features([x - 0.5, x[:, :, ::2, ::2] - 0.5], emb)


def register_pixel_features() -> str:
    """Register :class:`PixelFeatures` as the model ``pixel_features`` (idempotent); returns the name."""
    from shiftbench.registry import MODELS

    MODELS.add("pixel_features", PixelFeatures, description="test feature network (pixels)", task="features")
    return "pixel_features"
