"""The repository's tools/ scripts as modules, for the tests that run them (each loaded once per process)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def tool(name: str) -> ModuleType:
    """``tools/<name>.py``, imported as the module ``name``."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


HUB = {"classification", "segmentation", "detection", "captioning", "retrieval"}  # parts on hub backends


def skip_without_backends(part: str) -> None:
    """Skip a record part whose tiny hub models need a library this environment lacks."""
    import pytest

    if part in HUB:
        pytest.importorskip("transformers")
    if part == "detection":
        pytest.importorskip("pycocotools")
