"""GPU throughput: the corruptions' torch batch path against their numpy path, and Stable Diffusion 2
inpainting (random weights) run the reference's way against ours.

    python benchmarks/gpu.py [--device cuda] [--parts a,b] [--json benchmarks/results/gpu.json]
    python benchmarks/gpu.py --dry-run [--json out.json]   # tiny sizes on the CPU, under a minute

Part A, corruptions: each of the 19 corruptions at severity 3 on a batch of 256 real 224x224 photos
(the built-in ``objects`` dataset, resized). Params are drawn once up front (``shift.draw``), outside
both timings. The torch path is ``shift.apply_tensor(x, params)`` on an (N, 3, H, W) uint8 tensor
already on the device; the numpy path is ``shift.apply_images(images, params)`` on HxWx3 uint8 arrays,
on this machine's CPU in this one process. Each is warmed up first (numba kernels, noise tables,
CUDA kernels), then called on the whole batch until ``--budget`` seconds are spent (torch: at least
``--min-calls`` calls, numpy: at least one); the median call gives images per second. ``max abs diff``
is the largest byte difference between the two paths' outputs (the same params went into both).

Part B, Stable Diffusion 2 inpainting: the full-size architecture of
``stabilityai/stable-diffusion-2-inpainting`` built from config with seeded random weights (no
download): 9-channel UNet, the SD VAE, the OpenCLIP ViT-H text encoder, a word-level tokenizer built
here (77 tokens, as CLIP pads to), DDIM, 512 px, 20 steps, guidance 7.5. "reference" is the way the
reference code runs it: diffusers' ``StableDiffusionInpaintPipeline`` in float32, one image per
call in a Python loop. "ours" is the ``background_inpaint`` shift given the same weights as
:class:`Components` (``apply_batch``: mask, latents, prompts, DDIM loop, decode and paste back),
in float16 and bfloat16 (float32 as well, to separate batching from precision), a batch at a time.
Torch's defaults are kept: no TF32 for float32 matmuls, attention through SDPA (diffusers' default).
Each mode is warmed up by a 2-step call of the same batch shape. Random weights give meaningless
pictures and the same arithmetic as real ones.

``--dry-run``: tiny sizes (4 images of 64 px; tiny UNet / VAE / text encoder, 64 px, 2 steps), float32
only, on the CPU unless ``--device`` says otherwise: it exercises every code path, not the speed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SEVERITY = 3
GUIDANCE = 7.5
FULL = {"a_batch": 256, "a_size": 224, "b_size": 512, "b_steps": 20, "b_batch": 16, "b_images": 32,
        "b_reference_images": 4, "b_dtypes": ["float32", "float16", "bfloat16"], "b_model": "sd2"}
DRY = {"a_batch": 4, "a_size": 64, "b_size": 64, "b_steps": 2, "b_batch": 2, "b_images": 2,
       "b_reference_images": 2, "b_dtypes": ["float32"], "b_model": "tiny"}

# stabilityai/stable-diffusion-2-inpainting, as its unet/, vae/, text_encoder/ and scheduler/ configs say
SD2_UNET = {"sample_size": 64, "in_channels": 9, "out_channels": 4, "layers_per_block": 2,
            "block_out_channels": (320, 640, 1280, 1280), "attention_head_dim": (5, 10, 20, 20),
            "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
            "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
            "cross_attention_dim": 1024, "use_linear_projection": True, "norm_num_groups": 32, "act_fn": "silu",
            "flip_sin_to_cos": True, "freq_shift": 0}
SD2_VAE = {"in_channels": 3, "out_channels": 3, "latent_channels": 4, "block_out_channels": (128, 256, 512, 512),
           "down_block_types": ("DownEncoderBlock2D",) * 4, "up_block_types": ("UpDecoderBlock2D",) * 4,
           "layers_per_block": 2, "norm_num_groups": 32, "act_fn": "silu", "sample_size": 512}
SD2_TEXT = {"vocab_size": 49408, "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 23,
            "num_attention_heads": 16, "hidden_act": "gelu", "projection_dim": 512, "max_position_embeddings": 77}
SCHEDULER = {"num_train_timesteps": 1000, "beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012,
             "clip_sample": False, "set_alpha_to_one": False, "steps_offset": 1}
# the tests' tiny components (tests/shifts/test_background_diffusion.py): the same code paths in milliseconds
TINY_UNET = {"sample_size": 8, "in_channels": 9, "out_channels": 4, "layers_per_block": 1,
             "block_out_channels": (8, 16), "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D"),
             "up_block_types": ("CrossAttnUpBlock2D", "UpBlock2D"), "cross_attention_dim": 16, "norm_num_groups": 4,
             "attention_head_dim": 2}
TINY_VAE = {"in_channels": 3, "out_channels": 3, "latent_channels": 4, "block_out_channels": (8, 16),
            "down_block_types": ("DownEncoderBlock2D",) * 2, "up_block_types": ("UpDecoderBlock2D",) * 2,
            "norm_num_groups": 4, "layers_per_block": 1}
TINY_TEXT = {"vocab_size": 256, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 1,
             "num_attention_heads": 2, "max_position_embeddings": 12}
MODELS = {"sd2": (SD2_UNET, SD2_VAE, SD2_TEXT), "tiny": (TINY_UNET, TINY_VAE, TINY_TEXT)}
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
PROMPT_WORDS = ["this", "is", "a", "an", "picture", "of"]  # the class_label prompt's own words


class Deadline:
    """Skips the remaining measurements once ``limit`` seconds have passed, so that a run on a lent machine
    always ends and writes what it measured; each skipped row says so."""

    def __init__(self, limit: float):
        self.start, self.limit = time.perf_counter(), limit

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def passed(self) -> bool:
        return self.elapsed > self.limit


def synchronizer(device: str) -> Callable[[], None]:
    """Waits for the device's queued work (CUDA runs asynchronously); a no-op elsewhere."""
    import torch

    if torch.device(device).type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def timed(call: Callable[[], Any], sync: Callable[[], None], budget: float, min_calls: int,
          warm_up: Callable[[], Any] | None = None) -> dict[str, float]:
    """Median seconds of one ``call()`` after a warm-up call (``warm_up()``, else ``call()`` itself), repeated
    until ``budget`` seconds and ``min_calls`` calls are reached."""
    (warm_up or call)()
    sync()
    times: list[float] = []
    while len(times) < min_calls or sum(times) < budget:
        start = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "calls": len(times)}


def photos(n: int, size: int) -> list[np.ndarray]:
    """``n`` real photos of the built-in ``objects`` dataset (224 px), resized to ``size`` x ``size``."""
    import cv2

    return [cv2.resize(s.image, (size, size), interpolation=cv2.INTER_AREA if size <= s.image.shape[0]
                       else cv2.INTER_CUBIC) for s in object_samples(n)]


def object_samples(n: int) -> list[Any]:
    """``n`` samples of ``objects`` (real cut-outs on real scenes, exact masks), spread over the classes."""
    import shiftbench as sb

    objects = sb.load_dataset("objects")
    return [objects.load((i * 37) % len(objects)) for i in range(n)]  # 37 and 376 are coprime: no repeats


# -- Part A: corruptions ---------------------------------------------------------------------------------

def corruption_rows(names: Sequence[str], batch: int, size: int, device: str, budget: float, min_calls: int,
                    deadline: Deadline) -> dict[str, Any]:
    """Images per second of every corruption through ``apply_tensor`` on ``device`` and ``apply_images`` on the CPU."""
    import torch

    from shiftbench.shifts.corruptions import Corruption

    images = photos(batch, size)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous().to(device)
    torch_path = hasattr(Corruption, "apply_tensor")
    unavailable = None if torch_path else (
        "Corruption.apply_tensor does not exist in this checkout (src/shiftbench/shifts/corruptions/_torch.py): "
        "torch path not measured")
    if unavailable:
        print(f"Part A: {unavailable}", flush=True)
    rows = []
    for name in names:
        if deadline.passed():
            rows.append({"name": name, "skipped": f"time limit ({deadline.limit:.0f} s) reached"})
        else:
            rows.append(corruption_row(name, images, x if torch_path else None, budget, min_calls))
        print(_a_line(rows[-1]), flush=True)
    return {"batch": batch, "size": size, "severity": SEVERITY, "device": device, "torch_path": torch_path,
            "unavailable": unavailable, "budget_s": budget, "min_calls": min_calls,
            "statistic": "images/s = batch / median seconds of one batched call; params drawn outside the timing",
            "rows": rows}


def corruption_row(name: str, images: list[np.ndarray], x: Any, budget: float, min_calls: int) -> dict[str, Any]:
    """One corruption on ``images`` (numpy) and on ``x``, the same images as a device tensor (None: numpy only)."""
    import shiftbench as sb
    from shiftbench.sample import Sample

    shift = sb.create_shift(name)
    params = [shift.draw(Sample(image=im, id=f"{i}"), SEVERITY, seed=0) for i, im in enumerate(images)]
    outputs: dict[str, Any] = {}

    def numpy_call() -> None:
        outputs["numpy"] = shift.apply_images(images, params)

    def torch_call() -> None:
        outputs["torch"] = shift.apply_tensor(x, params)

    # numba kernels and noise tables do not depend on the batch size: a few images warm them up
    res = timed(numpy_call, lambda: None, budget, 1, warm_up=lambda: shift.apply_images(images[:8], params[:8]))
    row: dict[str, Any] = {"name": name, "numpy_img_s": len(images) / res["median_s"], "numpy_calls": res["calls"]}
    if x is None:
        return row
    try:
        res = timed(torch_call, synchronizer(str(x.device)), budget, min_calls)
    except Exception as exc:  # noqa: BLE001 - one corruption's failure is reported in its row; the others still run
        row["torch_error"] = f"{type(exc).__name__}: {exc}"[:300]
        print(f"{name}: apply_tensor failed: {row['torch_error']}", flush=True)
        return row
    out = outputs["torch"]
    if tuple(out.shape) != tuple(x.shape) or out.dtype != x.dtype or out.device != x.device:
        row["torch_error"] = (f"apply_tensor returned {out.dtype} {tuple(out.shape)} on {out.device} "
                              f"for {x.dtype} {tuple(x.shape)} on {x.device}")
        return row
    row.update(torch_img_s=len(images) / res["median_s"], torch_calls=res["calls"])
    row["speedup"] = row["torch_img_s"] / row["numpy_img_s"]
    ours = out.permute(0, 2, 3, 1).cpu().numpy().astype(np.int16)
    row["max_abs_diff"] = int(np.abs(ours - np.stack(outputs["numpy"]).astype(np.int16)).max())
    return row


def _a_line(row: dict[str, Any]) -> str:
    if "skipped" in row:
        return f"{row['name']:18s} skipped: {row['skipped']}"
    torch_cell = f"{row['torch_img_s']:10.0f}" if "torch_img_s" in row else f"{'–':>10s}"
    speed = f"{row['speedup']:7.1f}x" if "speedup" in row else f"{'–':>8s}"
    return f"{row['name']:18s} torch {torch_cell} img/s  numpy {row['numpy_img_s']:8.0f} img/s  {speed}"


# -- Part B: Stable Diffusion 2 inpainting ---------------------------------------------------------------

def word_tokenizer(words: Sequence[str], max_length: int) -> Any:
    """A word-level tokenizer (lower-cased, [BOS] text [EOS], padded to ``max_length``) with ``words``: CLIP's BPE
    files are not at hand offline, and the text encoder's cost depends on the padded length, not the vocabulary."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIAL_TOKENS)}
    for w in words:
        vocab.setdefault(w.lower(), len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[BOS] $A [EOS]",
                                                       special_tokens=[("[BOS]", 2), ("[EOS]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]",
                                   eos_token="[EOS]", model_max_length=max_length)


def build_components(model: str, words: Sequence[str], device: str, seed: int = 0) -> Any:
    """Float32 Components of ``model`` ("sd2" or "tiny") with seeded random weights, created on ``device``."""
    import diffusers
    import torch
    import transformers

    from shiftbench.shifts.background.diffusion import Components

    unet_cfg, vae_cfg, text_cfg = MODELS[model]
    tokenizer = word_tokenizer(words, text_cfg["max_position_embeddings"])
    if len(tokenizer) > text_cfg["vocab_size"]:
        raise ValueError(f"{len(tokenizer)} tokenizer words do not fit the text encoder's {text_cfg['vocab_size']}")
    text_config = transformers.CLIPTextConfig(**text_cfg, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    with torch.device(device):  # initialised in place: 1.3 B parameters, seconds on a GPU, minutes on a CPU
        torch.manual_seed(seed)
        unet = diffusers.UNet2DConditionModel(**unet_cfg)
        torch.manual_seed(seed + 1)
        vae = diffusers.AutoencoderKL(**vae_cfg)
        torch.manual_seed(seed + 2)
        text = transformers.CLIPTextModel(text_config)
    for m in (unet, vae, text):
        m.to(device).eval().requires_grad_(False)
    return Components(unet=unet, vae=vae, text_encoder=text, tokenizer=tokenizer,
                      scheduler=diffusers.DDIMScheduler(**SCHEDULER))


def in_dtype(parts: Any, dtype: str) -> Any:
    """A copy of float32 ``parts`` in ``dtype`` (the float32 weights stay for the other modes)."""
    import diffusers
    import torch

    if dtype == "float32":
        return parts
    to = getattr(torch, dtype)
    return type(parts)(unet=copy.deepcopy(parts.unet).to(to), vae=copy.deepcopy(parts.vae).to(to),
                       text_encoder=copy.deepcopy(parts.text_encoder).to(to), tokenizer=parts.tokenizer,
                       scheduler=diffusers.DDIMScheduler(**SCHEDULER))


def reference_pipeline(parts: Any) -> Any:
    """diffusers' StableDiffusionInpaintPipeline over the same modules (no safety checker)."""
    import diffusers

    pipe = diffusers.StableDiffusionInpaintPipeline(
        vae=parts.vae, text_encoder=parts.text_encoder, tokenizer=parts.tokenizer, unet=parts.unet,
        scheduler=diffusers.DDIMScheduler(**SCHEDULER), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _options(size: int) -> dict[str, Any]:
    return {"prompt": "class_label", "guidance": GUIDANCE, "size": size}


def time_reference(parts: Any, samples: Sequence[Any], params: Sequence[dict], size: int, steps: int,
                   sync: Callable[[], None]) -> dict[str, Any]:
    """The reference's way: one pipeline call per image, float32, in a Python loop (PIL in, PIL out)."""
    import torch
    from PIL import Image

    pipe = reference_pipeline(parts)

    def one(s: Any, p: dict, n_steps: int) -> Any:
        repaint = Image.fromarray(np.where(s.mask, 0, 255).astype(np.uint8))  # white = regenerate (background)
        return pipe(prompt=p["prompt"], image=Image.fromarray(s.image), mask_image=repaint, height=size, width=size,
                    num_inference_steps=n_steps, guidance_scale=GUIDANCE,
                    generator=torch.Generator().manual_seed(int(p["seed"]))).images[0]

    one(samples[0], params[0], min(2, steps))  # warm-up: same shapes, fewer steps
    sync()
    start = time.perf_counter()
    for s, p in zip(samples, params):
        one(s, p, steps)
    sync()
    return {"seconds": time.perf_counter() - start}


def time_ours(parts: Any, samples: Sequence[Any], params: Sequence[dict], batch: int, size: int, steps: int,
              sync: Callable[[], None]) -> dict[str, Any]:
    """Ours: the background_inpaint shift over ``parts``, ``batch`` images per ``apply_batch`` call."""
    import shiftbench as sb

    shift = sb.create_shift("background_inpaint", model=parts, steps=steps, **_options(size))
    warm_up = sb.create_shift("background_inpaint", model=parts, steps=min(2, steps), **_options(size))
    warm_up.apply_batch(samples[:batch], params[:batch])  # same batch shape, fewer steps
    sync()
    start = time.perf_counter()
    for i in range(0, len(samples), batch):
        shift.apply_batch(samples[i:i + batch], params[i:i + batch])
    sync()
    return {"seconds": time.perf_counter() - start}


def inpainting_rows(model: str, size: int, steps: int, batch: int, n_ours: int, n_reference: int,
                    dtypes: Sequence[str], device: str, deadline: Deadline) -> dict[str, Any]:
    """Seconds per image of the reference loop (float32) and of ours batched in each of ``dtypes``."""
    import torch

    import shiftbench as sb

    samples = object_samples(max(n_ours, n_reference))
    words = sorted({w for s in samples for w in f"{s.class_name} {s.caption}".replace(",", " ").split()})
    sync = synchronizer(device)
    start = time.perf_counter()
    parts = build_components(model, PROMPT_WORDS + words, device)
    sync()
    built_s = time.perf_counter() - start
    # prompts ("This is a picture of a <class>") and noise seeds, drawn once, outside every timing
    params = [sb.create_shift("background_inpaint", model=parts, **_options(size)).draw(s, seed=0) for s in samples]
    unet = parts.unet
    modules = {"unet": unet, "vae": parts.vae, "text_encoder": parts.text_encoder}
    info = {"model": model, "size": size, "steps": steps, "guidance": GUIDANCE, "device": device,
            "build_s": built_s, "parameters": {k: sum(p.numel() for p in m.parameters()) for k, m in modules.items()},
            "unet_attention": sorted({type(p).__name__ for p in unet.attn_processors.values()}),
            "text_attention": getattr(parts.text_encoder.config, "_attn_implementation", None),
            "matmul": _matmul_settings()}
    print(f"Part B: {model} components built in {built_s:.1f} s on {device} "
          f"({sum(info['parameters'].values()):,} parameters)", flush=True)
    plan = [("reference", "float32", 1, n_reference)] + [("ours", d, batch, n_ours) for d in dtypes]
    rows = []
    for mode, dtype, b, n in plan:
        row: dict[str, Any] = {"mode": mode, "dtype": dtype, "batch": b, "images": n}
        rows.append(row)
        if deadline.passed():
            row["skipped"] = f"time limit ({deadline.limit:.0f} s) reached"
            print(f"{mode} {dtype}: skipped", flush=True)
            continue
        try:
            if mode == "reference":
                res = time_reference(parts, samples[:n], params[:n], size, steps, sync)
            else:
                converted = in_dtype(parts, dtype)
                res = time_ours(converted, samples[:n], params[:n], b, size, steps, sync)
                del converted
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: reported in its row, the other modes still run
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"{mode} {dtype}: {row['error']}", flush=True)
            continue
        finally:
            if torch.device(device).type == "cuda":
                row["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
        row["s_per_image"] = res["seconds"] / n
        row["img_s"] = n / res["seconds"]
        print(f"{mode:9s} {dtype:8s} batch {b:2d}: {row['s_per_image']:.3f} s/image ({row['img_s']:.2f} img/s)",
              flush=True)
    ref = rows[0].get("s_per_image")
    for row in rows:
        if ref and "s_per_image" in row:
            row["speedup"] = ref / row["s_per_image"]
    return {**info, "rows": rows}


def _matmul_settings() -> dict[str, Any]:
    import torch

    cuda = torch.backends.cuda.matmul
    return {"cuda_matmul_allow_tf32": getattr(cuda, "allow_tf32", None),
            "cuda_matmul_fp16_reduced_precision": getattr(cuda, "allow_fp16_reduced_precision_reduction", None),
            "cudnn_allow_tf32": getattr(torch.backends.cudnn, "allow_tf32", None),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


# -- report ----------------------------------------------------------------------------------------------

def environment(device: str) -> dict[str, Any]:
    import cv2
    import diffusers
    import torch
    import transformers

    if torch.device(device).type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = _cpu_name()
    try:
        git = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10,
                             check=False)
        commit = git.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"device": device, "device_name": name, "cpu": _cpu_name(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "opencv_threads": cv2.getNumThreads(),
            "platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "cuda": torch.version.cuda, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__, "git": commit}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def markdown(result: dict[str, Any]) -> str:
    env = result["environment"]
    lines = [(f"{env['device_name']} ({env['device']}); torch {env['torch']}, diffusers {env['diffusers']}; "
              f"{'dry run; ' if result['dry_run'] else ''}wall time {result['wall_s']:.1f} s")]
    a = result.get("part_a")
    if a:
        lines += ["", f"Part A: corruptions, severity {a['severity']}, batch {a['batch']} of {a['size']} px",
                  *([f"({a['unavailable']})"] if a["unavailable"] else []), "",
                  "| corruption | torch img/s | numpy img/s | speedup | max abs diff |", "|---|---|---|---|---|"]
        for r in a["rows"]:
            if "skipped" in r:
                lines.append(f"| {r['name']} | skipped | | | |")
                continue
            torch_cell = f"{r['torch_img_s']:.0f}" if "torch_img_s" in r else ("error" if "torch_error" in r else "–")
            speed = f"{r['speedup']:.1f}x" if "speedup" in r else "–"
            diff = str(r["max_abs_diff"]) if "max_abs_diff" in r else "–"
            lines.append(f"| {r['name']} | {torch_cell} | {r['numpy_img_s']:.0f} | {speed} | {diff} |")
    b = result.get("part_b")
    if b:
        lines += ["", (f"Part B: SD2 inpainting ({b['model']} architecture, random weights), {b['size']} px, "
                       f"{b['steps']} DDIM steps, guidance {b['guidance']}; built in {b['build_s']:.1f} s"), "",
                  "| mode | dtype | batch | images | s / image | images / s | speedup |",
                  "|---|---|---|---|---|---|---|"]
        for r in b["rows"]:
            head = f"| {r['mode']} | {r['dtype']} | {r['batch']} | {r['images']} |"
            if "s_per_image" not in r:
                lines.append(f"{head} {'skipped' if 'skipped' in r else 'error'} | | |")
                continue
            speed = f"{r['speedup']:.2f}x" if "speedup" in r else "–"
            lines.append(f"{head} {r['s_per_image']:.3f} | {r['img_s']:.2f} | {speed} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes and models, float32, CPU: a smoke test")
    ap.add_argument("--device", default=None, help="default: cuda if available (cpu for --dry-run)")
    ap.add_argument("--parts", default="a,b", help="comma-separated: a (corruptions), b (inpainting)")
    ap.add_argument("--json", type=Path, default=None,
                    help="default: benchmarks/results/gpu.json; a dry run writes only where --json says")
    ap.add_argument("--names", nargs="*", default=None, help="corruptions (default: all 19)")
    ap.add_argument("--budget", type=float, default=None, help="seconds per timing in part A (default 1, dry run 0)")
    ap.add_argument("--min-calls", type=int, default=None, help="timed calls at least (default 3, dry run 1)")
    ap.add_argument("--time-limit", type=float, default=480.0,
                    help="seconds after which the remaining measurements are skipped (and say so)")
    args = ap.parse_args(argv)
    import torch

    from shiftbench.shifts.corruptions import CORRUPTION_GROUPS

    parts = {p.strip().lower() for p in args.parts.split(",") if p.strip()}
    if not parts or parts - {"a", "b"}:
        ap.error(f"--parts takes a, b or a,b; got {args.parts!r}")
    sizes = DRY if args.dry_run else FULL
    if args.json is None and not args.dry_run:
        args.json = ROOT / "benchmarks" / "results" / "gpu.json"
    device = args.device or ("cpu" if args.dry_run or not torch.cuda.is_available() else "cuda")
    budget = args.budget if args.budget is not None else (0.0 if args.dry_run else 1.0)
    min_calls = args.min_calls if args.min_calls is not None else (1 if args.dry_run else 3)
    names = args.names or list(CORRUPTION_GROUPS["all"])
    deadline = Deadline(args.time_limit)
    settings = {**sizes, "parts": sorted(parts), "time_limit_s": args.time_limit}
    result: dict[str, Any] = {"dry_run": args.dry_run, "settings": settings,
                              "environment": environment(device)}
    env = result["environment"]
    print(f"{env['device_name']} ({device}); torch {env['torch']}, diffusers {env['diffusers']}, "
          f"transformers {env['transformers']}", flush=True)

    def save() -> None:  # rewritten whole after each part, so that a run cut short keeps what it measured
        result["wall_s"] = deadline.elapsed
        if args.json is None:
            return
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")

    if "a" in parts:
        result["part_a"] = corruption_rows(names, sizes["a_batch"], sizes["a_size"], device, budget, min_calls,
                                           deadline)
        save()
    if "b" in parts:
        result["part_b"] = inpainting_rows(sizes["b_model"], sizes["b_size"], sizes["b_steps"], sizes["b_batch"],
                                           sizes["b_images"], sizes["b_reference_images"], sizes["b_dtypes"], device,
                                           deadline)
    save()
    print(markdown(result))
    if args.json is not None:
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
