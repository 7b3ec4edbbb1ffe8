"""Rebuild the `objects` asset folder (src/shiftbench/data/objects) from the Debian packages.

Needs, on the building machine only: ``apt-get install tuxpaint-stamps-default tuxpaint-data mate-backgrounds``.
The curation lists tools/objects_curation.tsv (cut-outs -> ImageNet classes) and tools/objects_scenes.tsv
(scene photos) say what goes in; this script only crops, downscales and writes, so the result is reproducible:

    python tools/build_objects.py            # writes src/shiftbench/data/objects/
    python tools/build_objects.py --check    # verifies the lists against the installed packages, writes nothing

Cut-outs: cropped to the bounding box of alpha > 0, then downscaled (Lanczos, premultiplied alpha by Pillow) so
the longer side is at most 256 px; stored as RGBA PNG. Scenes: downscaled so the short side is 320 px, stored
as RGB PNG (lossless, so every machine decodes the same bytes; a JPEG decoder may differ by a grey level).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import shutil
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
STAMPS = Path("/usr/share/tuxpaint/stamps")
OUT = ROOT / "src" / "shiftbench" / "data" / "objects"
CLASSES = ROOT / "src" / "shiftbench" / "data" / "imagenet" / "imagenet1k_classes.tsv"
MAX_CUTOUT_SIDE = 256
SCENE_SHORT_SIDE = 320
LICENCE_FILES = {
    "tuxpaint-stamps-default.copyright": "/usr/share/doc/tuxpaint-stamps-default/copyright",
    "tuxpaint-data.copyright": "/usr/share/doc/tuxpaint-data/copyright",
    "mate-backgrounds.copyright": "/usr/share/doc/mate-backgrounds/copyright",
    "GPL-2.txt": "/usr/share/common-licenses/GPL-2",
}


def read_tsv(path: Path) -> list[dict[str, str]]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))


def imagenet_classes() -> dict[int, tuple[str, str]]:
    rows = read_tsv(CLASSES)
    return {int(r["index"]): (r["wnid"], r["name"]) for r in rows}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_lists(objects: list[dict[str, str]], scenes: list[dict[str, str]]) -> None:
    classes = imagenet_classes()
    seen: set[str] = set()
    for row in objects:
        oid = row["object_id"]
        if oid in seen:
            sys.exit(f"duplicate object id {oid}")
        seen.add(oid)
        index = int(row["imagenet_index"])
        if classes.get(index) != (row["wnid"], row["imagenet_name"]):
            sys.exit(f"{oid}: index {index} is {classes.get(index)}, the list says {row['wnid']} {row['imagenet_name']}")
        if not (STAMPS / row["source"]).is_file():
            sys.exit(f"{oid}: {STAMPS / row['source']} not found (install tuxpaint-stamps-default)")
    scene_ids = [r["scene_id"] for r in scenes]
    if len(set(scene_ids)) != len(scene_ids):
        sys.exit("duplicate scene id")
    for row in scenes:
        if not Path(row["source"]).is_file():
            sys.exit(f"{row['scene_id']}: {row['source']} not found (install tuxpaint-data mate-backgrounds)")


def build_cutout(source: Path, target: Path) -> tuple[int, int]:
    with Image.open(source) as img:
        rgba = img.convert("RGBA")
    alpha = np.asarray(rgba)[..., 3]
    ys, xs = np.nonzero(alpha)
    rgba = rgba.crop((int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1))
    w, h = rgba.size
    factor = MAX_CUTOUT_SIDE / max(w, h)
    if factor < 1:
        rgba = rgba.resize((max(1, round(w * factor)), max(1, round(h * factor))), Image.Resampling.LANCZOS)
    arr = np.asarray(rgba).copy()
    arr[arr[..., 3] == 0, :3] = 0  # invisible pixels carry no colour: smaller files, no hidden content
    Image.fromarray(arr, "RGBA").save(target, optimize=True)
    return rgba.size


def build_scene(source: Path, target: Path) -> tuple[int, int]:
    with Image.open(source) as img:
        rgb = img.convert("RGB")
    w, h = rgb.size
    factor = SCENE_SHORT_SIDE / min(w, h)
    rgb = rgb.resize((round(w * factor), round(h * factor)), Image.Resampling.LANCZOS)
    rgb.save(target, optimize=True)
    return rgb.size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="check the lists only")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    objects = read_tsv(ROOT / "tools" / "objects_curation.tsv")
    scenes = read_tsv(ROOT / "tools" / "objects_scenes.tsv")
    check_lists(objects, scenes)
    if args.check:
        print(f"ok: {len(objects)} objects, {len(scenes)} scenes")
        return
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    (out / "cutouts").mkdir(parents=True)
    (out / "scenes").mkdir()
    (out / "licenses").mkdir()
    attribution = [("asset", "source_package", "source_file", "source_sha256", "licence", "copyright")]
    with open(out / "objects.tsv", "w", encoding="utf-8") as f:
        f.write("object_id\tfile\timagenet_index\twnid\timagenet_name\tphrase\twidth\theight\n")
        for row in objects:
            source = STAMPS / row["source"]
            name = f"cutouts/{row['object_id']}.png"
            w, h = build_cutout(source, out / name)
            f.write("\t".join([row["object_id"], name, row["imagenet_index"], row["wnid"], row["imagenet_name"],
                               row["phrase"], str(w), str(h)]) + "\n")
            attribution.append((name, "tuxpaint-stamps-default", str(source), sha256(source), "GPL-2",
                                "2002-2022 Bill Kendrick and the Tux Paint contributors"))
    with open(out / "scenes.tsv", "w", encoding="utf-8") as f:
        f.write("scene_id\tfile\tphrase\twidth\theight\n")
        for row in scenes:
            source = Path(row["source"])
            name = f"scenes/{row['scene_id']}.png"
            w, h = build_scene(source, out / name)
            f.write("\t".join([row["scene_id"], name, row["phrase"], str(w), str(h)]) + "\n")
            package = "tuxpaint-data" if "tuxpaint" in str(source) else "mate-backgrounds"
            holder = ("2002-2021 Bill Kendrick and the Tux Paint contributors" if package == "tuxpaint-data"
                      else "see licenses/mate-backgrounds.copyright (per-file holders)")
            attribution.append((name, package, str(source), sha256(source), "GPL-2+", holder))
    with open(out / "ATTRIBUTION.tsv", "w", encoding="utf-8") as f:
        f.write("# Every file in this folder and where it comes from. Images were cropped and downscaled by\n"
                "# tools/build_objects.py; they keep the licence of their source (GNU GPL version 2, text in licenses/).\n")
        for line in attribution:
            f.write("\t".join(line) + "\n")
    for name, source in LICENCE_FILES.items():
        shutil.copyfile(source, out / "licenses" / name)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {len(objects)} cut-outs and {len(scenes)} scenes to {out} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
