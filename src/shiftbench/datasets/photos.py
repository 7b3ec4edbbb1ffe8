"""`imagenet-photos`: the 20 labelled ImageNet validation photos that ship in the foolbox package (no masks).

They are read where they are installed (``pip install foolbox``; the package is located, not imported) or
from ``root=``: a folder or a foolbox wheel file holding ``imagenet_<NN>_<label>.jpg``. They are not copied
into shiftbench: they are ImageNet photos (copyright of their authors, ImageNet terms: non-commercial research),
redistributed by foolbox (MIT) for testing.
"""

from __future__ import annotations

import importlib.util
import io
import re
import zipfile
from pathlib import Path
from typing import Any

from ..errors import ImageError, ShiftbenchError
from ..labelspace import LabelSpace
from ..registry import DATASETS
from ..sample import Sample, image_error_reason, load_image, to_rgb_uint8
from .base import Dataset
from .imagenet import NUM_CLASSES, class_names, imagenet_class

PATTERN = re.compile(r"(?:^|/)imagenet_(\d+)_(\d+)\.(?:jpg|jpeg|png)$")


def foolbox_data_dir() -> Path | None:
    """foolbox's ``data`` folder if foolbox is installed (found without importing it), else None."""
    try:
        spec = importlib.util.find_spec("foolbox")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        data = Path(location) / "data"
        if data.is_dir():
            return data
    return None


@DATASETS.register("imagenet-photos", description="20 labelled ImageNet validation photos from the foolbox "
                   "package (pip install foolbox), no masks", size=20, annotations=("label",))
class ImageNetPhotos(Dataset):
    """ImageNet-style photos with ImageNet-1k labels (from the file names), for pipelines that segment
    the object themselves. Images are returned at their stored size (foolbox's: 512x512, one 1024x683)."""

    annotations = ("label",)
    num_classes = NUM_CLASSES

    def __init__(self, root: Any = None):
        if root is None:
            root = foolbox_data_dir()
            if root is None:
                raise ShiftbenchError("imagenet-photos reads the ImageNet photos of the foolbox package, which is "
                                      "not installed: pip install foolbox (or pass root= a folder or foolbox wheel)")
        self.root = Path(root).expanduser()
        if not self.root.exists():
            raise ShiftbenchError(f"imagenet-photos: {self.root} does not exist")
        self._zip = self.root.is_file()
        if self._zip:
            try:
                with zipfile.ZipFile(self.root) as zf:
                    names = zf.namelist()
            except zipfile.BadZipFile:
                raise ShiftbenchError(f"imagenet-photos: {self.root} is neither a folder nor a wheel/zip file") from None
        else:
            names = [p.relative_to(self.root).as_posix() for p in self.root.rglob("imagenet_*")]
        entries = []
        for name in names:
            match = PATTERN.search(name)
            if match:
                entries.append((int(match.group(1)), int(match.group(2)), name))
        if not entries:
            raise ShiftbenchError(f"imagenet-photos: no imagenet_<NN>_<label>.jpg files in {self.root}")
        entries.sort()
        for _, label, name in entries:
            if not 0 <= label < NUM_CLASSES:
                raise ShiftbenchError(f"imagenet-photos: {name} has label {label}, not an ImageNet-1k index")
        self._entries = entries
        self.class_names = class_names()
        self.label_space = LabelSpace.imagenet1k()
        self.description = f"{len(entries)} ImageNet photos from {self.root}"

    def __len__(self) -> int:
        return len(self._entries)

    def sample_id(self, index: int) -> str:
        return Path(self._entries[index][2]).stem

    def class_file_path(self, index: int) -> str:
        """``<wnid>/<file name>``: where ImageNet's layout (and ``generate --protocol imagenet-c``) puts the photo."""
        _, label, name = self._entries[index]
        return f"{imagenet_class(label).wnid}/{Path(name).name}"

    def load(self, index: int) -> Sample:
        _, label, name = self._entries[index]
        if self._zip:
            from PIL import Image

            try:
                with zipfile.ZipFile(self.root) as zf, Image.open(io.BytesIO(zf.read(name))) as img:
                    image = to_rgb_uint8(img, source=f"{self.root}!{name}")
            except ImageError:
                raise
            except KeyError:
                raise ImageError(f"{self.root}!{name}: not in the archive") from None
            except Exception as exc:  # noqa: BLE001 - any decoder error is one line naming the file
                raise ImageError(f"{self.root}!{name}: {image_error_reason(exc)}") from None
        else:
            image = load_image(self.root / name)
        return Sample(image=image, label=label, class_name=imagenet_class(label).name, id=self.sample_id(index),
                      meta={"path": f"{self.root}/{name}", "wnid": imagenet_class(label).wnid})
