"""torchvision image classifiers (``torchvision:NAME``): the architectures of ``torchvision.models`` with weights
from a local file, or torchvision's own published weights when torch hub's cache holds them (never downloaded).

Forms of NAME (the ``ARCH//path`` convention of ``open_clip:``):

- ``resnet50/IMAGENET1K_V2``: a weights name of the architecture (``DEFAULT`` resolves to one), read from torch
  hub's cache, where torchvision itself keeps it (``$TORCH_HOME/hub/checkpoints/<file of the weights' URL>``);
  a missing file is one error line saying where to put it. ``resnet50`` alone means ``resnet50/DEFAULT``.
- ``resnet50//path/to/weights.safetensors`` (or ``resnet50`` with ``weights="path"``): a local state dict,
  ``.safetensors`` or a torch file (``.pth``, ``.pt``, ``.bin``) read with ``torch.load(weights_only=True)``; a
  checkpoint holding it under ``state_dict`` or ``model``, or with DDP's ``module.`` prefix, is unwrapped.
  ``resnet50/IMAGENET1K_V1`` with ``weights="path"`` is a local copy of those published weights (RobustBench's
  Standard_R50 is torchvision's ResNet-50 V1), preprocessed by their recipe.
- ``pretrained=False``: the architecture at random initialisation (nothing loaded).

Preprocessing is the weights' own ``transforms()`` (torchvision's ``ImageClassification``: ``Resize(resize_size)``
on the shorter side, ``CenterCrop(crop_size)``, interpolation, mean/std) when a weights name is given, else
torchvision's standard ImageNet evaluation recipe: resize 256, crop 224, bilinear, ImageNet mean/std. The keywords
``resize_size``, ``crop_size``, ``interpolation``, ``mean`` and ``std`` override either.

Label space: the classification models of ``torchvision.models`` are ImageNet-1k models (every weights enum there is
an ``IMAGENET1K_*`` one, its categories in the standard wnid order), so a 1,000-class head of one of these
architectures is ImageNet-1k whatever file fills it: the library decides that, not the class count. Another head
(``num_classes=N``) is a numbered space (tie it to a dataset with ``label_map``) unless ``class_names`` names it.
"""

from __future__ import annotations

import difflib
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import ShiftbenchError
from ..install import install_command
from ..labelspace import recognize
from ..resize import check_interpolation, check_shorter
from .base import LabelSpace, Preprocess, TorchClassifier

__all__ = ["TorchvisionClassifier", "create", "parse_source", "hub_cache_file", "STANDARD_RECIPE"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# torchvision's ImageNet evaluation recipe (references/classification: --val-resize-size 256 --val-crop-size 224)
STANDARD_RECIPE = {"resize_size": 256, "crop_size": 224, "interpolation": "bilinear", "mean": IMAGENET_MEAN,
                   "std": IMAGENET_STD}
_ENV_LOCK = threading.Lock()


def parse_source(source: str) -> tuple[str, str | None, str | None]:
    """``ARCH[/WEIGHTS_NAME | /PATH]`` -> (ARCH, weights name or None, file path or None).

    >>> parse_source("resnet50/IMAGENET1K_V2")
    ('resnet50', 'IMAGENET1K_V2', None)
    >>> parse_source("resnet50//models/r50.pth")
    ('resnet50', None, '/models/r50.pth')
    >>> parse_source("resnet50")
    ('resnet50', None, None)
    """
    arch, sep, rest = source.partition("/")
    if not arch:
        raise ShiftbenchError(f"torchvision: expected ARCH, ARCH/WEIGHTS or ARCH//path/to/file, got {source!r}")
    if not sep:
        return arch, None, None
    if not rest:
        raise ShiftbenchError(f"torchvision:{source}: nothing after '/' "
                              f"(a weights name such as IMAGENET1K_V1, or a file)")
    # a bare word is a weights name (IMAGENET1K_V2, DEFAULT); anything shaped like a path is a file
    if "/" not in rest and "." not in rest and not os.path.exists(rest):
        return arch, rest, None
    return arch, None, rest


def _classifier_names() -> list[str]:
    import torchvision.models

    return list(torchvision.models.list_models(module=torchvision.models))


def _check_arch(arch: str) -> None:
    """One line for a name torchvision has no classifier of: another task's model, or a near miss."""
    import torchvision.models

    names = _classifier_names()
    if arch in names:
        return
    if arch in torchvision.models.list_models():
        family = torchvision.models.get_model_builder(arch).__module__.split(".")[2]
        raise ShiftbenchError(
            f"torchvision:{arch} is a {family} model (torchvision.models.{family}); torchvision: takes the image "
            f"classifiers of torchvision.models (resnet50, vit_b_16, convnext_tiny, ...)")
    close = difflib.get_close_matches(arch.lower(), names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise ShiftbenchError(f"torchvision: unknown classifier {arch!r}{hint} "
                          f"(torchvision.models.list_models(module=torchvision.models) lists {len(names)})")


def _weights_enum_member(arch: str, name: str) -> Any:
    import torchvision.models

    enum = torchvision.models.get_model_weights(arch)
    members = list(enum.__members__)  # includes DEFAULT
    if name not in members:
        close = difflib.get_close_matches(name, members, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ShiftbenchError(f"torchvision:{arch}: unknown weights {name!r}{hint} "
                              f"({enum.__name__}: {', '.join(members)}; "
                              f"or a file: torchvision:{arch}//path/to/weights.pth)")
    member = enum[name]
    if not member.meta.get("categories"):
        raise ShiftbenchError(f"torchvision:{arch}/{name}: {member} has no classifier head (feature-extraction "
                              f"weights); torchvision: needs classification weights ({', '.join(members)})")
    return member


def hub_cache_file(member: Any) -> Path:
    """Where torchvision keeps the weights ``member`` once downloaded: torch hub's ``checkpoints`` folder, under
    the file name of the weights' URL (``torch.hub.load_state_dict_from_url``'s rule)."""
    import torch.hub
    from urllib.parse import urlparse

    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(member.url).path)


@contextmanager
def _weights_only_loads() -> Iterator[None]:
    """Every ``torch.load`` in this block reads weights only: torchvision's builders read the hub file with
    ``weights_only=False``, and torch's documented ``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` switch overrides that."""
    with _ENV_LOCK:
        keys = ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
        saved = {k: os.environ.pop(k, None) for k in keys}
        os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
        try:
            yield
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None)
                if value is not None:
                    os.environ[key] = value


def _why(exc: BaseException) -> str:
    """One line for a failed load; torch's weights-only refusal says it in a paragraph."""
    text = str(exc).strip()
    if "Weights only load failed" in text:
        return "it holds more than tensors, and torch.load(weights_only=True) refuses to run its code"
    return (text.splitlines() or [type(exc).__name__])[0]


def _read_state_dict(path: Path, label: str) -> dict[str, Any]:
    """A local weights file -> a flat state dict of tensors (safetensors, or torch.load with weights_only)."""
    import torch

    if not path.is_file():
        raise ShiftbenchError(f"{label}: weights file {str(path)!r} not found")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(str(path), device="cpu")
        else:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickle with code in it, a truncated file, not a weights file at all
        raise ShiftbenchError(f"{label}: cannot read {str(path)!r} as weights ({_why(exc)})") from None
    for key in ("state_dict", "model"):  # training checkpoints keep the weights under one of these
        if isinstance(state, dict) and isinstance(state.get(key), dict) and not torch.is_tensor(state.get(key)):
            state = state[key]
            break
    if not isinstance(state, dict) or not state or not all(torch.is_tensor(v) for v in state.values()):
        raise ShiftbenchError(f"{label}: {str(path)!r} holds no state dict of tensors")
    if all(k.startswith("module.") for k in state):  # saved from DistributedDataParallel
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def _load_into(module: Any, state: dict[str, Any], arch: str, num_classes: int, label: str) -> None:
    """``module.load_state_dict(state, strict=True)``, or one line naming what does not fit."""
    own = module.state_dict()
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]  # torch fills these in
    unexpected = [k for k in state if k not in own]
    shapes = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if not (missing or unexpected or shapes):
        module.load_state_dict(state, strict=True)
        return
    parts = []
    if shapes:
        k = shapes[0]
        parts.append(f"{len(shapes)} of another shape ({k}: {list(state[k].shape)} in the file, "
                     f"{list(own[k].shape)} in {arch})")
    for what, keys in (("missing", missing), ("unexpected", unexpected)):
        if keys:
            parts.append(f"{len(keys)} {what} ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})")
    # only the classifier's width differs: say which num_classes the file was trained with
    widths = {int(state[k].shape[0]) for k in shapes if own[k].shape[0] == num_classes and state[k].ndim >= 1}
    width = widths.pop() if len(widths) == 1 else None
    hint = f"; its head has {width} classes: pass num_classes={width}" if width and not (missing or unexpected) else ""
    raise ShiftbenchError(f"{label}: the state dict does not fit {arch}: {'; '.join(parts)}{hint}")


def _preprocess(recipe: dict[str, Any], overrides: dict[str, Any], label: str) -> Preprocess:
    """torchvision's ``ImageClassification`` (Resize(resize_size) on the shorter side, CenterCrop(crop_size)) as a
    :class:`Preprocess`."""
    recipe = {**recipe, **{k: v for k, v in overrides.items() if v is not None}}
    crop, resize = int(recipe["crop_size"]), int(recipe["resize_size"])
    if crop < 1 or resize < 1:
        raise ShiftbenchError(f"{label}: crop_size and resize_size must be positive, got {crop} and {resize}")
    interpolation = check_interpolation(str(recipe["interpolation"]), f"{label}: interpolation")
    return Preprocess(
        size=(crop, crop), mean=tuple(recipe["mean"]), std=tuple(recipe["std"]), resize="shorter",
        resize_size=resize, crop_fraction=min(1.0, crop / resize), interpolation=interpolation, value_range=1.0,
    )


def _one_int(value: Any) -> int:
    """torchvision keeps its sizes as one-element lists."""
    return int(value[0]) if isinstance(value, (list, tuple)) else int(value)


def _recipe_of(member: Any) -> dict[str, Any]:
    """A weights enum member's ``transforms()`` (ImageClassification) as plain values."""
    t = member.transforms()
    return {"crop_size": _one_int(t.crop_size), "resize_size": _one_int(t.resize_size),
            "interpolation": getattr(t.interpolation, "value", str(t.interpolation)), "mean": tuple(t.mean),
            "std": tuple(t.std)}


class TorchvisionClassifier(TorchClassifier):
    """A ``torchvision.models`` classifier: the module, its declared preprocessing, its label space and the file
    its weights came from."""

    def __init__(self, module: Any, name: str, preprocess: Preprocess, label_space: LabelSpace,
                 weights_file: str | None = None, device: str = "cpu", dtype: str = "float32"):
        self.name = name
        self.preprocess = preprocess
        self.label_space = label_space
        self.weights_file = weights_file
        self._setup(module, device, dtype)

    def weight_files(self) -> list[str]:
        """The file the weights were read from (hashed into a run's identity); none at random initialisation."""
        return [self.weights_file] if self.weights_file else []


def _check_sizes(label: str, resize_size: Any, crop_size: Any) -> None:
    """The sizes a user gives: the shorter side and a square crop, each within resize.LIMIT."""
    for key, value in (("resize_size", resize_size), ("crop_size", crop_size)):
        if value is not None:
            check_shorter(value, f"{label}: {key}")


def create(source: str, device: str = "cpu", dtype: str = "float32", weights: str | os.PathLike | None = None,
           pretrained: bool = True, num_classes: int | None = None, class_names: Sequence[str] | None = None,
           **model_kwargs: Any) -> TorchvisionClassifier:
    """``torchvision:NAME`` factory (the forms are in the module docstring); ``model_kwargs``: the recipe's keys
    (``STANDARD_RECIPE``'s, over the weights' recipe; None keeps it), the others go to the builder."""
    try:
        import torchvision.models
    except ImportError as exc:
        raise ShiftbenchError(f"torchvision: models need a torchvision built for your torch: "
                              f"{install_command('torchvision')} ({exc})") from None
    label = f"torchvision:{source}"
    if not source:
        raise ShiftbenchError("torchvision: needs a classifier name, e.g. torchvision:resnet50/IMAGENET1K_V2")
    overrides = {key: model_kwargs.pop(key, None) for key in STANDARD_RECIPE}
    _check_sizes(label, overrides["resize_size"], overrides["crop_size"])  # before any weights are read
    arch, weights_name, path = parse_source(source)
    _check_arch(arch)
    if weights is not None:
        if path is not None:
            raise ShiftbenchError(f"{label}: weights given twice (in the name and as weights={str(weights)!r})")
        path = os.fspath(weights)
    if not pretrained and (weights_name or path):
        raise ShiftbenchError(f"{label}: pretrained=False builds a random initialisation; "
                              f"drop the weights or pretrained=False")
    member = None
    if pretrained and path is None:
        member = _weights_enum_member(arch, weights_name or "DEFAULT")
    elif weights_name is not None:  # a local copy of named weights: their recipe and head
        member = _weights_enum_member(arch, weights_name)
    if member is not None:
        label = f"torchvision:{arch}/{member.name}" + (f" (weights={path})" if path else "")
        categories = len(member.meta["categories"])
        if num_classes is not None and num_classes != categories:
            raise ShiftbenchError(f"{label}: these weights have {categories} classes, not num_classes={num_classes}")
        num_classes = categories
    num_classes = 1000 if num_classes is None else int(num_classes)
    if num_classes < 1:
        raise ShiftbenchError(f"{label}: num_classes must be positive, got {num_classes}")

    weights_file: str | None = None
    if member is not None and path is None:  # torchvision's own weights, from torch hub's cache only
        cached = hub_cache_file(member)
        if not cached.is_file():
            raise ShiftbenchError(
                f"{label}: {member} is not in torch hub's cache and shiftbench never downloads: put {cached.name} "
                f"(from {member.url}) at {cached}, or give a local file with weights=PATH")
        try:
            with _weights_only_loads():
                module = torchvision.models.get_model(arch, weights=member, **model_kwargs)
        except Exception as exc:  # not weights only (a pickle with code), truncated, or another architecture's
            raise ShiftbenchError(f"{label}: the cached {cached} does not load into {arch} ({_why(exc)})") from None
        weights_file = str(cached)
    else:
        try:
            module = torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **model_kwargs)
        except (TypeError, ValueError) as exc:  # a keyword the builder does not take, or a value it refuses
            raise ShiftbenchError(f"{label}: torchvision cannot build {arch} with {model_kwargs or 'these options'} "
                                  f"({_why(exc)})") from None
        if path is not None:
            _load_into(module, _read_state_dict(Path(path), label), arch, num_classes, label)
            weights_file = os.path.abspath(path)

    recipe = _recipe_of(member) if member is not None else dict(STANDARD_RECIPE)
    preprocess = _preprocess(recipe, overrides, label)
    if class_names is not None:
        if len(class_names) != num_classes:
            raise ShiftbenchError(f"{label}: {len(class_names)} class_names for a head of {num_classes} classes")
        space = recognize([str(c) for c in class_names], label)
    elif num_classes == 1000:
        space = LabelSpace.imagenet1k()  # torchvision's classifiers are ImageNet-1k models (module docstring)
    else:
        space = LabelSpace.numbered(label, num_classes)
    return TorchvisionClassifier(module, f"torchvision:{source}", preprocess, space, weights_file=weights_file,
                                 device=device, dtype=dtype)


def preprocess_from_weights(member: Any, **overrides: Any) -> Preprocess:
    """The :class:`Preprocess` of a torchvision weights enum member (``ResNet50_Weights.IMAGENET1K_V2``): the tensor
    its ``transforms()`` gives, as a model of this adapter sees it; ``overrides`` as ``create``'s keywords."""
    return _preprocess(_recipe_of(member), overrides, f"torchvision weights {getattr(member, 'name', member)}")
