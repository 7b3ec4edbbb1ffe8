"""Sample and Query records, and conversion of any image input to HxWx3 uint8 RGB.

>>> import numpy as np
>>> s = Sample(image=np.zeros((4, 6), dtype=np.uint8), label=3, id="a")
>>> s.image.shape, s.image.dtype.name
((4, 6, 3), 'uint8')
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ImageError

__all__ = ["Sample", "Query", "to_rgb_uint8", "load_image", "decode_image", "image_error_reason", "to_mask", "content_id"]


def _where(source: Any) -> str:
    return f"{source}: " if source else ""


def content_id(value: np.ndarray | str) -> str:
    """A stable id derived from content, for records that come without one.

    An array gives ``"img-"`` + a blake2b digest of its shape, dtype and bytes; a string gives
    ``"txt-"`` + a digest of its UTF-8 text. Different content gives different ids (so different random
    streams in shifts); the same content gives the same id on every machine and in every process.

    >>> content_id("a dog") == content_id("a dog") != content_id("a cat")
    True
    >>> content_id(np.zeros((2, 2, 3), np.uint8))
    'img-9dfa78a2f4402971fe5bfbd5caa5d807'
    """
    digest = hashlib.blake2b(digest_size=16)
    if isinstance(value, str):
        digest.update(b"text\x1f" + value.encode("utf-8", "surrogatepass"))  # lone surrogates too
        return "txt-" + digest.hexdigest()
    arr = np.ascontiguousarray(value)
    digest.update(f"{arr.shape}\x1f{arr.dtype.str}\x1f".encode("ascii"))
    digest.update(memoryview(arr).cast("B"))
    return "img-" + digest.hexdigest()


def to_rgb_uint8(image: Any, source: str | os.PathLike | None = None) -> np.ndarray:
    """Normalise a PIL image or ndarray to a C-contiguous HxWx3 uint8 RGB array.

    Accepted: PIL images of any mode (L, LA, RGB, RGBA, P, CMYK, I;16, I, F, 1); arrays HxW,
    HxWx1, HxWx2 (grey+alpha), HxWx3, HxWx4 (alpha dropped) of dtype bool, uint8, uint16 (scaled by
    1/257), other integers within 0..255, or floats within [0, 1]. Alpha is dropped, not composited:
    shiftbench keeps masks separately. ``source`` names the file in error messages.
    """
    where = _where(source)
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow is a core dependency
        Image = None
    if Image is not None and isinstance(image, Image.Image):
        return _pil_to_rgb(image, where)
    if not isinstance(image, np.ndarray):
        raise ImageError(f"{where}expected a PIL image or numpy array, got {type(image).__name__}")
    arr = image
    if arr.ndim == 3 and arr.shape[-1] not in (1, 2, 3, 4) and arr.shape[0] in (1, 3, 4):
        raise ImageError(
            f"{where}array of shape {arr.shape} looks channels-first; pass HxWxC (e.g. arr.transpose(1, 2, 0))"
        )
    if arr.ndim == 3 and arr.shape[-1] in (1, 2):
        arr = arr[..., 0]
    elif arr.ndim == 3 and arr.shape[-1] == 4:
        arr = arr[..., :3]
    elif arr.ndim == 3 and arr.shape[-1] != 3 or arr.ndim not in (2, 3):
        raise ImageError(f"{where}expected an HxW or HxWxC image with C in 1..4, got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ImageError(f"{where}image is empty (shape {arr.shape})")
    arr = _to_uint8(arr, where)
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    return np.ascontiguousarray(arr)


def _to_uint8(arr: np.ndarray, where: str) -> np.ndarray:
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8) * 255
    if arr.dtype == np.uint16:
        # 65535 -> 255 exactly; rounding keeps 8-bit data stored in 16 bits (x*257) exact.
        return ((arr.astype(np.uint32) + 128) // 257).astype(np.uint8)
    if np.issubdtype(arr.dtype, np.integer):
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > 255:
            raise ImageError(
                f"{where}integer image of dtype {arr.dtype} has values {lo}..{hi}, outside 0..255; "
                "scale it to uint8 first"
            )
        return arr.astype(np.uint8)
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)):
            raise ImageError(f"{where}float image contains NaN or infinite values")
        lo, hi = float(arr.min()), float(arr.max())
        if lo < 0.0 or hi > 1.0:
            raise ImageError(
                f"{where}float image has values {lo:.3g}..{hi:.3g}; float images must lie in [0, 1]"
            )
        return np.rint(arr * 255.0).astype(np.uint8)
    raise ImageError(f"{where}unsupported image dtype {arr.dtype}")


def _pil_to_rgb(img: Any, where: str) -> np.ndarray:
    mode = img.mode
    if mode in ("RGB",):
        return np.asarray(img, dtype=np.uint8).copy()
    if mode in ("I;16", "I;16B", "I;16L", "I;16N"):
        return to_rgb_uint8(np.asarray(img).astype(np.uint16), where.rstrip(": ") or None)
    if mode == "I":
        arr = np.asarray(img)
        hi = int(arr.max()) if arr.size else 0
        if hi > 255:  # 32-bit integer images are 16-bit data in practice (PNG 16-bit greyscale)
            if hi > 65535 or int(arr.min()) < 0:
                raise ImageError(f"{where}32-bit image with values outside 0..65535 cannot be converted")
            arr = arr.astype(np.uint16)
        return to_rgb_uint8(arr, where.rstrip(": ") or None)
    if mode == "F":
        return to_rgb_uint8(np.asarray(img, dtype=np.float32), where.rstrip(": ") or None)
    if mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    try:
        return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()
    except (ValueError, OSError) as exc:
        raise ImageError(f"{where}cannot convert image mode {mode} to RGB ({exc})") from None


def image_error_reason(exc: BaseException) -> str:
    """Why an image library refused a file, in a few words (for a one-line error naming the file).

    Covers what Pillow raises while opening or decoding: its pixel-count guard
    (``DecompressionBombError``, or its warning when warnings are errors), unknown formats,
    truncated data (``OSError``), damaged headers (``SyntaxError``, ``ValueError``, ``struct.error``,
    ``EOFError``, ``IndexError``, ...), and running out of memory.
    """
    from PIL import Image, UnidentifiedImageError

    if isinstance(exc, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
        return (f"larger than Pillow's decompression-bomb limit of {Image.MAX_IMAGE_PIXELS} pixels ({exc}); "
                "raise PIL.Image.MAX_IMAGE_PIXELS if you trust the file")
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, not an image"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, UnidentifiedImageError):
        return "not a readable image (unknown or corrupt format)"
    if isinstance(exc, MemoryError):
        return "too large to decode in memory"
    detail = str(exc).strip() or "no detail"
    if isinstance(exc, OSError):  # Pillow's truncated / broken data
        return f"cannot read image ({detail})"
    return f"cannot read image ({type(exc).__name__}: {detail})"


def load_image(path: str | os.PathLike) -> np.ndarray:
    """Read an image file as HxWx3 uint8 RGB (EXIF orientation applied); errors name the file.

    Any exception of the image library while opening or decoding becomes one :class:`ImageError`
    that names the file and the reason (see :func:`image_error_reason`).
    """
    return decode_image(Path(path), Path(path))


def decode_image(source: Any, name: Any) -> np.ndarray:
    """An image file or file-like object as HxWx3 uint8 RGB (EXIF orientation applied); any decoder error
    becomes one :class:`ImageError` naming ``name`` (a path, or a record such as ``shard.tar:key``)."""
    from PIL import Image, ImageOps

    try:
        with Image.open(source) as img:
            img.load()
            img = ImageOps.exif_transpose(img)
            return to_rgb_uint8(img, source=name)
    except ImageError:
        raise
    except Exception as exc:  # noqa: BLE001 - decoders raise many types; each becomes one line
        raise ImageError(f"{name}: {image_error_reason(exc)}") from None


def to_mask(mask: Any, shape: tuple[int, int], source: str | None = None) -> np.ndarray:
    """Validate a mask: HxW bool (binary) or HxW integer instance map matching ``shape``."""
    where = _where(source)
    arr = np.asarray(mask)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim != 2:
        raise ImageError(f"{where}mask must be HxW, got shape {arr.shape}")
    if arr.shape != tuple(shape):
        raise ImageError(f"{where}mask shape {arr.shape} does not match image shape {tuple(shape)}")
    if arr.dtype == np.bool_ or np.issubdtype(arr.dtype, np.integer):
        return np.ascontiguousarray(arr)
    raise ImageError(f"{where}mask must be bool or an integer instance map, got dtype {arr.dtype}")


@dataclass
class Sample:
    """One record: an RGB image and the labels that come with it.

    ``mask`` is HxW bool (one object) or an integer instance map; ``boxes`` is an (N, 4) float array
    of ``x0, y0, x1, y1`` pixel corners; ``box_labels`` the class of each box. ``frames``: a perturbation
    sequence (ImageNet-P, shifts/perturbations) as uint8 (T, H, W, 3), T >= 2, each frame the image's size;
    ``image`` is then its last frame (what a thumbnail shows).
    """

    image: np.ndarray
    label: int | None = None
    class_name: str | None = None
    mask: np.ndarray | None = None
    boxes: np.ndarray | None = None
    box_labels: np.ndarray | None = None
    caption: str | None = None
    id: str | None = None  # None: derived from the image content (see content_id)
    meta: dict[str, Any] = field(default_factory=dict)
    frames: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.image = to_rgb_uint8(self.image, source=self.meta.get("path") if self.meta else None)
        if self.frames is not None:
            frames = np.asarray(self.frames)
            if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[0] < 2 or frames.shape[1:] != self.image.shape:
                raise ImageError(f"sample {self.id}: frames must be uint8 (T >= 2, {', '.join(map(str, self.image.shape))}),"
                                 f" got {frames.dtype} {frames.shape}")
            self.frames = frames
        # Without an id, the content decides the random streams of shifts: two different images never
        # share a noise field, and the same image always gets the same one.
        self.id = content_id(self.image) if self.id is None else str(self.id)
        h, w = self.image.shape[:2]
        if self.mask is not None:
            self.mask = to_mask(self.mask, (h, w), source=f"sample {self.id}")
        if self.boxes is not None:
            boxes = np.asarray(self.boxes, dtype=np.float32).reshape(-1, 4)
            self.boxes = boxes
            if self.box_labels is not None:
                labels = np.asarray(self.box_labels).reshape(-1)
                if len(labels) != len(boxes):
                    raise ImageError(
                        f"sample {self.id}: {len(boxes)} boxes but {len(labels)} box labels"
                    )
                self.box_labels = labels
        if self.label is not None:
            self.label = int(self.label)

    @property
    def size(self) -> tuple[int, int]:
        """(height, width)."""
        return int(self.image.shape[0]), int(self.image.shape[1])

    def replace(self, **changes: Any) -> "Sample":
        """A copy with some fields changed (the image is not copied unless replaced)."""
        return dataclasses.replace(self, **changes)


@dataclass
class Query:
    """A composed-retrieval query: a reference sample and a modification text, with its target."""

    reference: Sample
    text: str
    target_id: str | None = None
    subset_ids: tuple[str, ...] | None = None
    id: str | None = None  # None: derived from the modification text and the reference's id
    category: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.id is None and isinstance(self.text, str):
            self.id = content_id(f"{self.reference.id}\x1f{self.text}")
        self.id = str(self.id)
        if not isinstance(self.text, str):
            raise ImageError(f"query {self.id}: modification text must be a string, got {type(self.text).__name__}")
        if self.subset_ids is not None:
            self.subset_ids = tuple(str(s) for s in self.subset_ids)
            if self.target_id is not None and str(self.target_id) not in self.subset_ids:
                raise ImageError(f"query {self.id}: subset does not contain its target {self.target_id!r}")
        if self.target_id is not None:
            self.target_id = str(self.target_id)

    def replace(self, **changes: Any) -> "Query":
        return dataclasses.replace(self, **changes)
