"""Provenance: package versions, git hash, host and devices, recorded with every run."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

PACKAGES = (
    "shiftbench", "numpy", "pillow", "opencv-python-headless", "pyyaml", "click", "rich", "jinja2",
    "torch", "safetensors", "onnxruntime", "timm", "open_clip_torch", "transformers", "diffusers",
    "accelerate", "sentence-transformers", "pycocotools", "scikit-image", "scipy",
)


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_hash(path: str | Path | None = None) -> str | None:
    """The commit of the shiftbench checkout (None for an installed wheel or without git)."""
    here = Path(path) if path else Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                           capture_output=True, text=True, timeout=5)
    return out.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def versions() -> dict[str, str]:
    """Installed versions of the packages that can change a number (missing ones left out)."""
    return {name: v for name in PACKAGES if (v := package_version(name)) is not None}


def environment(devices: bool = False) -> dict[str, Any]:
    """What ``shiftbench env`` prints. ``devices`` imports torch (when installed) to list accelerators."""
    info: dict[str, Any] = {
        "shiftbench": package_version("shiftbench"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git": git_hash(),
        "packages": {name: package_version(name) for name in PACKAGES if name != "shiftbench"},
        "backends": {mod: importlib.util.find_spec(mod) is not None
                     for mod in ("torch", "onnxruntime", "timm", "open_clip", "transformers", "diffusers")},
        "devices": ["cpu"],
    }
    if devices and info["backends"]["torch"]:
        try:
            import torch

            if torch.cuda.is_available():
                info["devices"] += [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]
            if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
                info["devices"].append("mps")
        except Exception as exc:  # a broken torch install should not break `env`
            info["devices"].append(f"torch import failed: {exc}")
    return info
