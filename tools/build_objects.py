"""Rebuild the `objects` asset folder (src/shiftbench/data/objects) from the Debian packages.

Needs, on the building machine only: ``apt-get install tuxpaint-stamps-default tuxpaint-data mate-backgrounds``
and scikit-image (its bundled data photos). The curation lists tools/objects_curation.tsv (cut-outs -> ImageNet
classes), tools/objects_contexts.tsv (where each object is photographed) and tools/objects_scenes.tsv (scene photos,
their crops and contexts) say what goes in; this script only crops, downscales and writes, so the result is
reproducible:

    python tools/build_objects.py            # writes src/shiftbench/data/objects/
    python tools/build_objects.py --check    # verifies the lists against the installed packages, writes nothing

Cut-outs: cropped to the bounding box of alpha > 0, then downscaled (Lanczos, premultiplied alpha by Pillow) so
the longer side is at most 256 px; stored as RGBA PNG. Scenes: cropped where the list gives a crop, downscaled
so the short side is 320 px (a smaller crop keeps its size: no upscaling), stored as RGB PNG (lossless, so every machine decodes the same bytes; a JPEG decoder may differ by a grey level).
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
CONTEXTS = ("sky", "water", "grass", "forest", "foliage", "rock", "indoor", "street")
SKIMAGE_DATA = """Scenes from scikit-image's bundled data (skimage/data), as its data docstrings state:

- coffee.png: "This photograph is courtesy of Pikolo Espresso Bar. [...] No copyright restrictions. CC0 by the
  photographer (Rachel Michetti)." Used: scenes/wooden_table.png (a crop of the table beside the cup).
- gravel.png: from CC0Textures (Gravel04), licensed under the Creative Commons CC0 License. Used: scenes/gravel.png.
- brick.png: from CC0Textures (Bricks25), licensed under the Creative Commons CC0 License. Used: scenes/brick_paving.png.

CC0 1.0 Universal (public domain dedication): https://creativecommons.org/publicdomain/zero/1.0/
"""

README = """# Assets of the `objects` dataset

- `cutouts/`: {objects} photo cut-outs (RGBA PNG, longer side <= 256 px) from Debian `tuxpaint-stamps-default`.
- `scenes/`: {scenes} scene photos (RGB PNG, short side at most 320 px) from Debian `tuxpaint-data` (templates),
  `mate-backgrounds` (nature) and scikit-image's bundled data (CC0).
- `objects.tsv`, `scenes.tsv`: ids, files, ImageNet-1k classes, caption phrases and natural contexts.
- `ATTRIBUTION.tsv`: every image here with its source package, source file, the source's SHA-256, licence and
  copyright holder.
- `licenses/`: the GNU GPL version 2 text and the Debian copyright files of the three source packages.

The images from the Debian packages are licensed under the GNU General Public License, version 2
(tuxpaint-stamps-default: GPL-2; tuxpaint-data and mate-backgrounds: GPL-2 or later), as their sources are; the
three from scikit-image are CC0 (licenses/scikit-image-data.txt); they were cropped and downscaled
by tools/build_objects.py of the shiftbench repository, which rebuilds this folder from the Debian packages.
The rest of shiftbench is Apache-2.0; these data files keep their own licence.
"""


def read_tsv(path: Path) -> list[dict[str, str]]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))


def imagenet_classes() -> dict[int, tuple[str, str]]:
    rows = read_tsv(CLASSES)
    return {int(r["index"]): (r["wnid"], r["name"]) for r in rows}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_lists(objects: list[dict[str, str]], scenes: list[dict[str, str]], contexts: list[dict[str, str]]) -> None:
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
        if not scene_source(row["source"]).is_file():
            sys.exit(f"{row['scene_id']}: {row['source']} not found (install tuxpaint-data mate-backgrounds scikit-image)")
        check_contexts(row["scene_id"], row["contexts"])
        if row["crop"] and len(row["crop"].split(",")) != 4:
            sys.exit(f"{row['scene_id']}: crop must be left,top,right,bottom, got {row['crop']!r}")
    tagged = {r["object_id"]: r["contexts"] for r in contexts}
    if set(tagged) != seen:
        sys.exit(f"objects_contexts.tsv must tag every object once: missing {sorted(seen - set(tagged))}, "
                 f"unknown {sorted(set(tagged) - seen)}")
    for oid, words in tagged.items():
        check_contexts(oid, words)
    for word in CONTEXTS:
        n = sum(word in r["contexts"].split(",") for r in scenes)
        if n < 3:
            print(f"note: context {word!r} has {n} scenes (fewer than three)")


def check_contexts(what: str, words: str) -> None:
    unknown = [w for w in words.split(",") if w not in CONTEXTS]
    if not words or unknown:
        sys.exit(f"{what}: contexts must be a comma-separated subset of {', '.join(CONTEXTS)}, got {words!r}")


def scene_source(source: str) -> Path:
    if source.startswith("skimage:"):
        import skimage

        return Path(skimage.__file__).parent / "data" / source[len("skimage:"):]
    return Path(source)


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


def build_scene(source: Path, target: Path, crop: str = "") -> tuple[int, int]:
    with Image.open(source) as img:
        rgb = img.convert("RGB")
    if crop:
        rgb = rgb.crop(tuple(int(v) for v in crop.split(",")))
    w, h = rgb.size
    factor = SCENE_SHORT_SIDE / min(w, h)
    if factor < 1:  # a small crop keeps its pixels: upscaling would only invent them
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
    contexts = read_tsv(ROOT / "tools" / "objects_contexts.tsv")
    check_lists(objects, scenes, contexts)
    tagged = {r["object_id"]: r["contexts"] for r in contexts}
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
        f.write("object_id\tfile\timagenet_index\twnid\timagenet_name\tphrase\twidth\theight\tcontexts\n")
        for row in objects:
            source = STAMPS / row["source"]
            name = f"cutouts/{row['object_id']}.png"
            w, h = build_cutout(source, out / name)
            f.write("\t".join([row["object_id"], name, row["imagenet_index"], row["wnid"], row["imagenet_name"],
                               row["phrase"], str(w), str(h), tagged[row["object_id"]]]) + "\n")
            attribution.append((name, "tuxpaint-stamps-default", str(source), sha256(source), "GPL-2",
                                "2002-2022 Bill Kendrick and the Tux Paint contributors"))
    with open(out / "scenes.tsv", "w", encoding="utf-8") as f:
        f.write("scene_id\tfile\tphrase\twidth\theight\tcontexts\n")
        for row in scenes:
            source = scene_source(row["source"])
            name = f"scenes/{row['scene_id']}.png"
            w, h = build_scene(source, out / name, row["crop"])
            f.write("\t".join([row["scene_id"], name, row["phrase"], str(w), str(h), row["contexts"]]) + "\n")
            where = row["source"] + (f" (crop {row['crop']})" if row["crop"] else "")
            if row["source"].startswith("skimage:"):
                holder = ("Rachel Michetti (photographer), courtesy of Pikolo Espresso Bar" if "coffee" in row["source"]
                          else "CC0Textures")
                attribution.append((name, "scikit-image", where, sha256(source), "CC0-1.0", holder))
                continue
            package = "tuxpaint-data" if "tuxpaint" in str(source) else "mate-backgrounds"
            holder = ("2002-2021 Bill Kendrick and the Tux Paint contributors" if package == "tuxpaint-data"
                      else "see licenses/mate-backgrounds.copyright (per-file holders)")
            attribution.append((name, package, where, sha256(source), "GPL-2+", holder))
    with open(out / "ATTRIBUTION.tsv", "w", encoding="utf-8") as f:
        f.write("# Every file in this folder and where it comes from. Images were cropped and downscaled by\n"
                "# tools/build_objects.py; they keep the licence of their source (GNU GPL version 2 or CC0, in licenses/).\n")
        for line in attribution:
            f.write("\t".join(line) + "\n")
    (out / "README.md").write_text(README.format(objects=len(objects), scenes=len(scenes)), encoding="utf-8")
    for name, source in LICENCE_FILES.items():
        shutil.copyfile(source, out / "licenses" / name)
    (out / "licenses" / "scikit-image-data.txt").write_text(SKIMAGE_DATA, encoding="utf-8")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {len(objects)} cut-outs and {len(scenes)} scenes to {out} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
