"""Image-folder reader: ``root/<class>/<image>``; ImageNet wnid folder names map to ImageNet-1k labels.

>>> # root/n02391049/zebra1.jpg -> Sample(label=340, class_name="zebra", id="n02391049/zebra1.jpg")
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from ..errors import ShiftbenchError
from ..labelspace import LabelSpace
from ..registry import DATASETS
from ..sample import Sample, decode_image
from .common import (IMAGE_EXTENSIONS, ON_ERROR, VERIFY, ReaderDataset, check_choice, check_inside, check_root,
                     one_line, screen, shown)
from .contexts import assign_contexts, read_contexts
from .cue_conflict_folder import CueConflictFolder
from .imagenet import NUM_CLASSES, class_names as imagenet_class_names, imagenet_classes, wnid_to_index

WNID = re.compile(r"^n\d{8}$")


@DATASETS.register("imagefolder", description="image folder reader: root/<class>/<image>; ImageNet wnid "
                   "folders map to ImageNet-1k labels", reader=True, annotations=("label",))
class ImageFolder(ReaderDataset):
    """Images in one sub-folder per class, sorted by relative path; ids are the relative paths.

    ``classes``: ``"auto"`` (ImageNet-1k labels when every folder is an ImageNet-1k wnid, else folder order),
    ``"imagenet"`` (require wnid folders) or ``"folders"`` (labels 0..K-1 in sorted folder order).
    Files with other extensions are ignored; hidden files and folders too. Symlinks that lead out of
    ``root`` are refused. ``contexts``: a TSV or JSON file mapping a class folder or an image to the
    object's contexts, or ``"bundled"`` for ImageNet wnid folders (datasets/contexts.py): every sample then
    carries ``meta["contexts"]``, which Mixed-Same / Mixed-Rand need; a file that leaves an image without
    contexts is refused here.
    """

    annotations = ("label",)

    def __init__(self, root: Any = None, classes: str = "auto", on_error: str = "fail", verify: str = "header",
                 contexts: Any = None):
        self.root = check_root(root, "imagefolder")
        check_choice("classes", classes, ("auto", "imagenet", "folders"))
        self.on_error = check_choice("on_error", on_error, ON_ERROR)
        check_choice("verify", verify, VERIFY)
        try:
            folders = sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError as exc:
            raise ShiftbenchError(f"imagefolder: cannot list {shown(self.root)} ({one_line(exc)})") from None
        if not folders:
            raise ShiftbenchError(f"imagefolder: {self.root} has no class sub-folders")
        known = wnid_to_index()
        use_imagenet = classes == "imagenet" or (classes == "auto" and all(f in known for f in folders))
        if use_imagenet:
            unknown = [f for f in folders if f not in known]
            if unknown:
                raise ShiftbenchError(f"imagefolder: folders that are not ImageNet-1k wnids: "
                                      f"{', '.join(shown(u) for u in unknown[:5])}")
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
        files = self._list_images(folders)
        if not files:
            raise ShiftbenchError(f"imagefolder: no images ({', '.join(IMAGE_EXTENSIONS)}) under {self.root}")
        self._files, self.skipped = screen(files, lambda rel: [self.root / rel], self.root, on_error, verify)
        self._contexts: dict[str, tuple[str, ...]] = {}
        if contexts is not None:
            images = {rel: rel.split("/", 1)[0] for rel in self._files}
            self._contexts = assign_contexts(read_contexts(contexts), images, contexts, "imagefolder",
                                             also=[*files, *folders])
        self.description = f"image folder {self.root} ({len(folders)} classes, {self.label_source} labels" + \
            (", contexts given)" if contexts is not None else ")")

    def _list_images(self, folders: list[str]) -> list[str]:
        """The image files below the class folders (relative POSIX paths in sorted order), hidden ones left out;
        a symlink that leads out of the root (or loops) is refused."""
        files: list[str] = []
        for folder in folders:
            for path in sorted((self.root / folder).rglob("*")):
                rel = path.relative_to(self.root).as_posix()
                if any(part.startswith(".") for part in path.relative_to(self.root).parts):
                    continue
                if path.suffix.lower() in IMAGE_EXTENSIONS:
                    check_inside(self.root, rel, "image")  # refuses symlinks out of the root, and loops
                    if not path.is_dir():
                        files.append(rel)
        return files

    def write_mirror_index(self, folder: Path, written: Mapping[int, str]) -> None:
        """Every class folder of the source in the generated ``folder``, even one that received no image (a
        class of no sample, a limit, a skipped file): the label space, and so every label, read back unchanged."""
        if self.label_source == "folders":
            for name in self.class_names or []:
                (Path(folder) / name).mkdir(parents=True, exist_ok=True)

    @staticmethod
    def detect(path: Path) -> bool:
        """A folder whose sub-folders hold images, and no other reader's layout (VOC, COCO, CIRR, FashionIQ, the
        cue-conflict stimuli)."""
        path = Path(path)
        if not path.is_dir() or (path / "JPEGImages").is_dir() or (path / "captions").is_dir():
            return False
        if CueConflictFolder.detect(path):
            return False
        if any(p.is_file() for p in path.glob("*.json")) or (path / "annotations").is_dir():
            return False
        try:
            for sub in path.iterdir():
                if sub.is_dir() and not sub.name.startswith("."):
                    if any(p.suffix.lower() in IMAGE_EXTENSIONS for p in sub.iterdir()):
                        return True
        except OSError:  # a folder it may not list: not recognisably an image folder (the reader says why)
            return False
        return False

    def labels_used(self) -> set[int]:
        """The labels of the class folders that hold an image (ImageNet indices for wnid folders)."""
        return {self._label[rel.split("/", 1)[0]] for rel in self._files}

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
        path = self.root / rel
        meta: dict[str, Any] = {"path": str(self.root / rel), "folder": folder}
        if rel in self._contexts:
            meta["contexts"] = list(self._contexts[rel])
        return Sample(image=decode_image(path, shown(path)), label=label, class_name=name, id=rel, meta=meta)
