"""Image-folder reader: ``root/<class>/<image>``; ImageNet wnid folder names map to ImageNet-1k labels.

>>> # root/n02391049/zebra1.jpg -> Sample(label=340, class_name="zebra", id="n02391049/zebra1.jpg")
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import ShiftbenchError
from ..labelspace import LabelSpace
from ..registry import DATASETS
from ..sample import Sample, load_image
from .common import IMAGE_EXTENSIONS, ON_ERROR, VERIFY, ReaderDataset, check_choice, check_root, resolve_inside, screen
from .imagenet import NUM_CLASSES, class_names as imagenet_class_names, imagenet_classes, wnid_to_index

WNID = re.compile(r"^n\d{8}$")


@DATASETS.register("imagefolder", description="image folder reader: root/<class>/<image>; ImageNet wnid "
                   "folders map to ImageNet-1k labels", reader=True, annotations=("label",))
class ImageFolder(ReaderDataset):
    """Images in one sub-folder per class, sorted by relative path; ids are the relative paths.

    ``classes``: ``"auto"`` (ImageNet-1k labels when every folder is an ImageNet-1k wnid, else folder order),
    ``"imagenet"`` (require wnid folders) or ``"folders"`` (labels 0..K-1 in sorted folder order).
    Files with other extensions are ignored; hidden files and folders too. Symlinks that lead out of
    ``root`` are refused.
    """

    annotations = ("label",)

    def __init__(self, root: Any = None, classes: str = "auto", on_error: str = "fail", verify: str = "header"):
        self.root = check_root(root, "imagefolder")
        check_choice("classes", classes, ("auto", "imagenet", "folders"))
        self.on_error = check_choice("on_error", on_error, ON_ERROR)
        check_choice("verify", verify, VERIFY)
        folders = sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not folders:
            raise ShiftbenchError(f"imagefolder: {self.root} has no class sub-folders")
        known = wnid_to_index()
        use_imagenet = classes == "imagenet" or (classes == "auto" and all(f in known for f in folders))
        if use_imagenet:
            unknown = [f for f in folders if f not in known]
            if unknown:
                raise ShiftbenchError(f"imagefolder: folders that are not ImageNet-1k wnids: {', '.join(unknown[:5])}")
            self.num_classes = NUM_CLASSES
            self.class_names = imagenet_class_names()
            self._label = {f: known[f] for f in folders}
            self.label_space = LabelSpace.imagenet1k()
        else:
            self.num_classes = len(folders)
            self.class_names = list(folders)
            self._label = {f: i for i, f in enumerate(folders)}
            # the folder names are the classes, whatever their count: 1,000 folders named cls_0000..
            # are not ImageNet (only wnid folders are)
            self.label_space = LabelSpace.custom(folders, name=f"folders:{self.root.name}")
        self.label_source = "imagenet" if use_imagenet else "folders"
        files: list[str] = []
        for folder in folders:
            for path in sorted((self.root / folder).rglob("*")):
                rel = path.relative_to(self.root).as_posix()
                if any(part.startswith(".") for part in path.relative_to(self.root).parts):
                    continue
                if path.suffix.lower() in IMAGE_EXTENSIONS and not path.is_dir():
                    resolve_inside(self.root, rel, "image")  # refuses symlinks out of the root
                    files.append(rel)
        if not files:
            raise ShiftbenchError(f"imagefolder: no images ({', '.join(IMAGE_EXTENSIONS)}) under {self.root}")
        self._files, self.skipped = screen(files, lambda rel: [self.root / rel], self.root, on_error, verify)
        self.description = f"image folder {self.root} ({len(folders)} classes, {self.label_source} labels)"

    @staticmethod
    def detect(path: Path) -> bool:
        """A folder whose sub-folders hold images, and no other reader's layout (VOC, COCO, CIRR, FashionIQ)."""
        path = Path(path)
        if not path.is_dir() or (path / "JPEGImages").is_dir() or (path / "captions").is_dir():
            return False
        if any(path.glob("*.json")) or (path / "annotations").is_dir():
            return False
        for sub in path.iterdir():
            if sub.is_dir() and not sub.name.startswith("."):
                if any(p.suffix.lower() in IMAGE_EXTENSIONS for p in sub.iterdir()):
                    return True
        return False

    def __len__(self) -> int:
        return len(self._files)

    def sample_id(self, index: int) -> str:
        return self._files[index]

    def source_path(self, index: int) -> str:
        return self._files[index]

    def load(self, index: int) -> Sample:
        rel = self._files[index]
        folder = rel.split("/", 1)[0]
        label = self._label[folder]
        name = imagenet_classes()[label].name if self.label_source == "imagenet" else folder
        return Sample(image=load_image(self.root / rel), label=label, class_name=name, id=rel,
                      meta={"path": str(self.root / rel), "folder": folder})
