"""Record what the run kernel produces, so that a restructuring can be checked value for value (issue 26).

Runs (a) cuts of the quick demo's three specs (configs/demo_quick.yaml, demo_objectcompose_quick.yaml,
demo_cir_quick.yaml: fewer images and shift entries, every kind of condition kept: the corruptions, the
background shifts with the controls and the adversarial background, curation, retrieval under image and
text corruptions) into one store, as ``shiftbench demo --quick`` does, and (b) one small spec per task
(classification, segmentation, detection, captioning, retrieval) on the tiny hub models and fixtures of the
end-to-end tests (tests/tiny_hub.py, tests/coco_synth.py), each into its own store. From every store it
reads, straight from the SQLite tables (as stored, no reader in between), per condition
(``run | model | dataset | shift params sSEVERITY``):

- its status, n and result rows ``metric: [value, n]``, values exact (``float.hex``), and the sha256 of
  the rows' extras (``rows()`` gives them back as sorted tuples);
- its per-sample predictions as stored, inline when small, else their count and sha256;
- its per-sample values (``samples`` table) per metric: kind, count and the sha256 of the ids with the
  stored array's bytes;

and every artifact: ``run | key`` with the sha256 and size of its bytes and the sha256 of its meta (the
report's thumbnails among them), and each run's name, seed, status, canonical spec and identity (spec hash
and run id too where the spec holds no temporary path; folder fingerprints, which hash mtimes, masked).

Temporary folders (the per-task fixtures) are written ``<TMP>`` wherever they appear, so two recordings
compare equal. Torch runs on one thread while recording (float results can depend on the thread count).

    python tools/record_behaviour.py                 # writes tests/records/behaviour.json
    python tools/record_behaviour.py --check         # compares with it instead, prints the differences
    python tools/record_behaviour.py --out other.json

tests/test_behaviour_records.py runs the same ``record()`` against the current code and compares.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
RECORD = TESTS / "records" / "behaviour.json"
FORMAT = 1
INLINE_LIMIT = 4096  # a condition's predictions above this many characters are kept as a hash

# -- the demo's specs, cut ---------------------------------------------------------------------------------

# (file stem, overrides, shift entries kept: (name, params) of the bundled file, the severities to run)
DEMO_CUTS: list[tuple[str, dict[str, Any], list[tuple[str, dict[str, Any], list[int] | None]]]] = [
    ("demo_quick", {"limit": 6, "batch_size": 4}, [
        ("clean", {}, None),
        *[(name, {}, [3]) for name in (
            "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur", "zoom_blur", "snow",
            "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate")],
        ("gaussian_noise", {}, [3, 5]),
        ("jpeg_compression", {}, [3, 5]),
    ]),
    ("demo_objectcompose_quick", {"limit": 12, "batch_size": 4}, [
        ("clean", {}, None),
        ("background_scene", {"scene": "mixed_same"}, None),
        ("background_scene", {"scene": "mixed_rand"}, None),
        ("background_color", {"color": "red"}, None),
        ("background_color", {"color": "colorful"}, None),
        ("background_texture", {"texture": 1}, None),
        ("object_only", {}, None),
        ("background_only", {}, None),
        ("adversarial_texture", {"early_stop": True}, None),
    ]),
    ("demo_cir_quick", {"limit": 24, "batch_size": 8}, [
        ("clean", {}, None),
        ("gaussian_noise", {}, None),
        ("text_swap", {}, None),
        ("text_qwerty", {}, None),
        ("text_remove_char", {}, None),
        ("text_misspelling", {}, None),
    ]),
]


def bundled_spec(stem: str) -> dict[str, Any]:
    """A bundled spec (src/shiftbench/configs/STEM.yaml), read from the installed package."""
    from importlib import resources

    import yaml

    return yaml.safe_load(resources.files("shiftbench").joinpath(f"configs/{stem}.yaml").read_text(encoding="utf-8"))


def _entry(entry: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(entry, str):
        return entry, {}
    return str(entry["name"]), dict(entry.get("params") or {})


def demo_specs() -> list[dict[str, Any]]:
    """The three quick-demo specs, cut: the overrides applied and only the kept shift entries (in the
    bundled file's order), each with the severities named (or its own)."""
    out = []
    for stem, overrides, keep in DEMO_CUTS:
        spec = copy.deepcopy(bundled_spec(stem))
        spec.update(overrides)
        shifts = []
        for name, params, severities in keep:
            found = [e for e in spec["shifts"] if _entry(e) == (name, params)]
            if len(found) != 1:
                raise SystemExit(f"{stem}.yaml: {len(found)} shift entries {name} {params} (the cut needs one)")
            entry = found[0]
            if severities is not None:
                entry = {"name": name, **({"params": params} if params else {}), "severities": severities}
            shifts.append(entry)
        spec["shifts"] = shifts
        out.append(spec)
    return out


def run_demo_cut(store: Path) -> None:
    """The cut specs one after the other into one store, as the demo runs its parts."""
    import shiftbench as sb

    for spec in demo_specs():
        sb.evaluate(spec, store=store)


# -- one small spec per task, on the end-to-end tests' tiny models and fixtures --------------------------

TEMPLATES = ["a photo of a {}."]


def _tests_on_path() -> None:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))


def task_classification(tmp: Path, store: Path) -> None:
    """The bundled classifier, a hub CLIP and a real open_clip CLIP (a tiny config, random init, from a local
    folder) zero-shot, on `objects`."""
    import shiftbench as sb
    import tiny_hub

    clip = tiny_hub.save_tiny_clip(tmp / "clip")
    folder = tmp / "open_clip"
    tiny_hub.save_tiny_open_clip(folder)
    given = {"open_clip:tiny": sb.create_model(f"open_clip:{folder}", templates=TEMPLATES)}  # a name free of tmp paths
    spec = {"name": "behaviour-classification", "dataset": "objects", "limit": 5, "seed": 0, "batch_size": 2,
            "log_samples": True, "metrics": ["top1", "top5", "ece"],
            "models": ["efficientnet_lite0", {"name": f"hf:{clip}", "params": {"templates": TEMPLATES}},
                       "open_clip:tiny"],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [3]}, {"name": "fog", "severities": [2]}]}
    sb.evaluate(spec, store=store, models=given)


def _write_voc(root: Path, n: int = 4) -> Path:
    """A Pascal VOC-format folder from `objects` renders: object pixels a VOC class, a 2-pixel void ring."""
    import cv2
    import numpy as np
    from PIL import Image

    import shiftbench as sb
    from shiftbench.datasets.voc import voc_colormap

    data = sb.load_dataset("objects")
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (root / sub).mkdir(parents=True)
    palette = voc_colormap().reshape(-1).tolist()
    ids = []
    for k in range(n):
        s = data.load(k * (len(data) // n))
        fg = np.asarray(s.mask) > 0
        ring = cv2.dilate(fg.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool) & ~fg
        label = np.zeros(fg.shape, np.uint8)
        label[fg] = 1 + (k * 7) % 20
        label[ring] = 255
        image_id = f"2007_{k:06d}"
        Image.fromarray(s.image).save(root / "JPEGImages" / f"{image_id}.jpg", quality=95)
        png = Image.fromarray(label, mode="P")
        png.putpalette(palette)
        png.save(root / "SegmentationClass" / f"{image_id}.png")
        ids.append(image_id)
    (root / "ImageSets" / "Segmentation" / "val.txt").write_text("\n".join(ids) + "\n")
    return root


def task_segmentation(tmp: Path, store: Path) -> None:
    """A tiny hub SegFormer (VOC-21 id2label) on a VOC-format folder."""
    import shiftbench as sb
    import tiny_hub
    from shiftbench.labelspace import LabelSpace

    root = _write_voc(tmp / "VOC2012")
    seg = tiny_hub.save_tiny_segformer(tmp / "segformer", id2label=list(LabelSpace.voc21().class_names))
    spec = {"name": "behaviour-segmentation", "dataset": str(root), "models": [f"hf:{seg}"], "metrics": ["miou"],
            "seed": 0, "batch_size": 3, "log_samples": True,
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [2]}, {"name": "motion_blur", "severities": [4]}]}
    sb.evaluate(spec, store=store)


def task_detection(tmp: Path, store: Path) -> None:
    """The tests' colour-blob detector (box and mask AP) and a tiny hub DETR on a synthetic COCO set."""
    import coco_synth
    import shiftbench as sb
    import tiny_hub

    root = coco_synth.write_coco_set(tmp / "coco")
    detr = tiny_hub.save_tiny_detr(tmp / "detr", dict(coco_synth.CATEGORIES), num_queries=8)
    spec = {"name": "behaviour-detection", "dataset": str(root), "metrics": ["box_ap", "mask_ap"], "seed": 0,
            "batch_size": 4, "log_samples": True,
            "models": [coco_synth.DETECTOR, {"name": f"hf:{detr}", "params": {"score_threshold": 0.0}}],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [2]}]}
    sb.evaluate(spec, store=store)


def task_captioning(tmp: Path, store: Path) -> None:
    """A tiny hub BLIP-2 on `objects`, its special tokens' output rows zeroed (as in test_e2e_captioning)."""
    import torch
    import transformers

    import shiftbench as sb
    import tiny_hub

    folder = tiny_hub.save_tiny_blip2(tmp / "blip2")
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.Blip2ForConditionalGeneration.from_pretrained(folder)
    with torch.no_grad():
        model.get_output_embeddings().weight[sorted(set(tok.all_special_ids))] = 0.0
    model.save_pretrained(folder)
    spec = {"name": "behaviour-captioning", "dataset": "objects", "limit": 4, "batch_size": 2, "seed": 0,
            "log_samples": True, "models": [{"name": f"hf:{folder}", "params": {"max_new_tokens": 4}}],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [3]}], "metrics": ["text_similarity"]}
    sb.evaluate(spec, store=store)


def _write_cirr(root: Path) -> Path:
    """A CIRR-format folder: 9 random 48 px gallery images, 3 queries with their image sets."""
    import numpy as np
    from PIL import Image

    names = [f"dev-{i}-0-img{i}" for i in range(9)]
    (root / "img_raw" / "dev").mkdir(parents=True)
    for i, name in enumerate(names):
        Image.fromarray(np.random.default_rng(100 + i).integers(0, 256, (48, 48, 3), dtype=np.uint8)).save(
            root / "img_raw" / "dev" / f"{name}.png")
    captions = [
        {"pairid": 12, "reference": names[0], "target_hard": names[1], "caption": "make it red",
         "target_soft": {names[1]: 1.0}, "img_set": {"id": 3, "members": names[:6]}},
        {"pairid": 13, "reference": names[6], "target_hard": names[2], "caption": "two of them",
         "img_set": {"id": 4, "members": [names[6], names[2], names[3], names[4], names[5], names[1]]}},
        {"pairid": 14, "reference": names[7], "target_hard": names[8], "caption": "a small blue dog",
         "img_set": {"id": 5, "members": [names[7], names[8], names[0], names[3], names[4], names[5]]}},
    ]
    (root / "cirr" / "captions").mkdir(parents=True)
    (root / "cirr" / "image_splits").mkdir(parents=True)
    (root / "cirr" / "captions" / "cap.rc2.val.json").write_text(json.dumps(captions))
    (root / "cirr" / "image_splits" / "split.rc2.val.json").write_text(
        json.dumps({n: f"./dev/{n}.png" for n in names}))
    return root


def task_retrieval(tmp: Path, store: Path) -> None:
    """The bundled retrievers and a sum fusion on a tiny hub CLIP, on a CIRR-format folder."""
    import shiftbench as sb
    import tiny_hub

    root = _write_cirr(tmp / "cirr")
    clip = tiny_hub.save_tiny_clip(tmp / "clip")
    spec = {"name": "behaviour-retrieval", "dataset": str(root), "seed": 0, "batch_size": 2, "log_samples": True,
            "models": ["image_only", "combiner", {"name": "sum_fusion", "params": {"encoder": f"hf:{clip}"}}],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [5]}, {"name": "text_qwerty", "severities": [3]}],
            "metrics": ["recall", "recall_subset", "rank"]}
    sb.evaluate(spec, store=store)


TASKS: dict[str, Callable[[Path, Path], None]] = {
    "classification": task_classification,
    "segmentation": task_segmentation,
    "detection": task_detection,
    "captioning": task_captioning,
    "retrieval": task_retrieval,
}


# -- reading a store ----------------------------------------------------------------------------------------

def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def _exact(value: Any) -> Any:
    """A stored number as an exact string (floats as float.hex), other values as they are."""
    if isinstance(value, float):
        return value.hex()
    return value


class _Paths:
    """Writes the temporary folder ``<TMP>`` in strings (plain and URL-quoted)."""

    def __init__(self, tmp: Path | None):
        self.subs = []
        if tmp is not None:
            for t in {str(tmp), str(Path(tmp).resolve())}:
                self.subs += [(t, "<TMP>"), (quote(t, safe=""), quote("<TMP>", safe=""))]
        self.subs.sort(key=lambda s: -len(s[0]))

    def __call__(self, text: Any) -> Any:
        if not isinstance(text, str):
            return text
        for old, new in self.subs:
            text = text.replace(old, new)
        return text

    def blob(self, data: bytes) -> bytes:
        """Bytes with the folder replaced when they are UTF-8 text (JSON artifacts); others unchanged."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data
        return self(text).encode("utf-8")


def _mask_mtimes(identity: Any) -> Any:
    """A run identity with the folder fingerprints' digests masked: they hash file sizes and mtimes
    (engine/identity.py, tree_fingerprint), which differ between two writes of the same fixture."""
    if isinstance(identity, dict):
        if {"files", "bytes", "sha256"} <= set(identity) and identity.get("files") != 1:
            return {**identity, "sha256": "<mtimes>"}
        return {k: _mask_mtimes(v) for k, v in identity.items()}
    if isinstance(identity, list):
        return [_mask_mtimes(v) for v in identity]
    return identity


def read_store(db: Path, tmp: Path | None = None) -> dict[str, Any]:
    """Everything a run left in ``db`` that the behaviour depends on (no times, hosts or versions).

    ``conditions`` maps ``run | model | dataset | shift params sSEVERITY`` to its status, n, result rows
    (``metric: [value, n]``, values exact), the sha256 of the rows' extras, the predictions and the
    per-sample values (``metric: [kind, count, sha256 of the ids and the stored array's bytes]``).
    ``artifacts`` maps ``run | key`` to ``[sha256 of the bytes, size, sha256 of the meta]``."""
    norm = _Paths(tmp)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        runs, labels, conditions = [], {}, {}
        for name, spec_json, spec_hash, run_id, seed, status, identity in conn.execute(
                "SELECT name, spec_json, spec_hash, run_id, seed, status, identity_json FROM runs ORDER BY name"):
            plain = norm(spec_json) == spec_json
            identity = None if identity is None else json.dumps(_mask_mtimes(json.loads(norm(identity))),
                                                                sort_keys=True, ensure_ascii=False)
            runs.append({"name": name, "seed": seed, "status": status, "spec": norm(spec_json),
                         "identity": identity, "spec_hash": spec_hash if plain else None,
                         "run_id": run_id if plain else None})
        for cid, run, model, dataset, shift, params, severity, status, n in conn.execute(
                "SELECT c.condition_id, r.name, c.model, c.dataset, c.shift, c.params, c.severity, c.status, c.n"
                " FROM conditions c JOIN runs r ON c.run_id = r.run_id"):
            if isinstance(severity, float) and severity.is_integer():
                severity = int(severity)  # 3 and 3.0 name one condition (severities are real numbers in [1, 5])
            label = f"{run} | {norm(model)} | {norm(dataset)} | {shift} {norm(params)} s{severity!r}"
            labels[cid] = label
            conditions[label] = {"status": status, "n": n, "results": {}, "extra": {}, "predictions": [],
                                 "samples": {}}
        for cid, metric, value, n, extra in conn.execute("SELECT condition_id, metric, value, n, extra FROM results"):
            conditions[labels[cid]]["results"][metric] = [_exact(value), n]
            conditions[labels[cid]]["extra"][metric] = norm(extra)
        for cid, sid, text in conn.execute("SELECT condition_id, sample_id, prediction FROM predictions"
                                           " ORDER BY condition_id, sample_id"):
            conditions[labels[cid]]["predictions"].append([norm(sid), norm(text)])
        for cid, metric, kind, ids, values in _samples(db):
            # the ids as JSON and the values as float64 .npy bytes, whatever layout the store keeps them in
            text = json.dumps([str(i) for i in ids], separators=(",", ":"))
            conditions[labels[cid]]["samples"][metric] = [kind, len(ids), _sha(norm(text).encode("utf-8") + b"\0"
                                                                                + _npy64(values))]
        artifacts = {}
        for run, key, data, meta in conn.execute(
                "SELECT r.name, a.key, a.data, a.meta FROM artifacts a JOIN runs r ON a.run_id = r.run_id"):
            blob = norm.blob(bytes(data))
            artifacts[f"{run} | {norm(key)}"] = [_sha(blob), len(blob), None if meta is None else _sha(norm(meta))]
    finally:
        conn.close()
    for entry in conditions.values():
        entry["results"] = dict(sorted(entry["results"].items()))
        entry["extra"] = _sha(json.dumps(entry["extra"], sort_keys=True, ensure_ascii=False))
        entry["samples"] = dict(sorted(entry["samples"].items()))
        blob = json.dumps(entry["predictions"], ensure_ascii=False)
        if len(blob) > INLINE_LIMIT:
            entry["predictions"] = {"count": len(entry["predictions"]), "sha256": _sha(blob)}
    return {"runs": runs, "conditions": dict(sorted(conditions.items())), "artifacts": dict(sorted(artifacts.items()))}


def _samples(db: Path) -> Iterator[tuple[int, str, str, list[str], Any]]:
    """Every stored per-sample record ``(condition id, metric, kind, ids, values)``, read by the store's own
    reader (its layout is the store's business, the values are the behaviour)."""
    from shiftbench.condition import params_key
    from shiftbench.results.store import Store

    with Store(db, create=False) as store:
        with store.reading("its per-sample values"):
            keeps = store.keeps_samples()
            cids = {} if not keeps else {
                (r[0], r[1], r[2], r[3], r[4], r[5]): r[6] for r in store._conn.execute(
                    "SELECT run_id, model, dataset, shift, params, severity, condition_id FROM conditions")}
        for run in store.runs() if keeps else []:
            for s in store.samples(run["run_id"]):
                key = (run["run_id"], s["model"], s["dataset"], s["shift"], params_key(s["params"]), s["severity"])
                yield cids[key], s["metric"], s["kind"], s["ids"], s["values"]


def _npy64(values: Any) -> bytes:
    """``values`` as the float64 .npy bytes the store wrote before it kept them compact (np.save, no pickles)."""
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(values, dtype=np.float64), allow_pickle=False)
    return buffer.getvalue()


def rows(part: dict[str, Any]) -> list[tuple]:
    """A part's result rows as sorted tuples ``(run, model, dataset, shift params sSEVERITY, metric, value, n)``
    (values as recorded: float.hex strings, or None)."""
    return sorted((*label.split(" | "), metric, value, n) for label, entry in part["conditions"].items()
                  for metric, (value, n) in entry["results"].items())


# -- recording ------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def record_part(part: str) -> tuple[dict[str, Any], float]:
    """One part (``demo`` or a task name) run in a fresh temporary folder: (its record, seconds)."""
    _tests_on_path()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shiftbench-behaviour-") as name, _one_thread():
        tmp = Path(name)
        store = tmp / "results.db"
        if part == "demo":
            run_demo_cut(store)
        else:
            TASKS[part](tmp, store)
        out = read_store(store, tmp)
    return out, time.perf_counter() - start


PARTS = ["demo", *TASKS]


def record(parts: list[str] | None = None, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The record of every part (the demo's cut specs and one spec per task)."""
    import shiftbench

    out: dict[str, Any] = {"format": FORMAT, "environment": environment(), "parts": {}}
    for part in parts or PARTS:
        out["parts"][part], seconds = record_part(part)
        if log:
            numbers = ", ".join(f"{v} {k}" for k, v in counts(out["parts"][part]).items())
            log(f"{part}: {numbers} in {seconds:.1f} s ({shiftbench.__file__})")
    return out


ENVIRONMENT = ("numpy", "torch", "opencv-python-headless", "pillow", "transformers", "onnxruntime", "scipy",
               "scikit-image", "sentence-transformers")


def environment() -> dict[str, str | None]:
    """The versions the numbers depend on (kept beside the record, not compared: a difference in them
    explains a difference in the values)."""
    from importlib import metadata

    out: dict[str, str | None] = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in ENVIRONMENT:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def counts(part: dict[str, Any]) -> dict[str, int]:
    conds = part["conditions"].values()
    return {"rows": len(rows(part)), "conditions": len(part["conditions"]),
            "predictions": sum(p["count"] if isinstance(p, dict) else len(p) for p in (c["predictions"] for c in conds)),
            "per-sample arrays": sum(len(c["samples"]) for c in conds),
            "thumbnails": sum(1 for k in part["artifacts"] if " | thumb/" in k), "artifacts": len(part["artifacts"])}


# -- comparing ------------------------------------------------------------------------------------------

def _flatten(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(v, f"{path}/{k}", out)
    else:
        out[path] = value


def differences(expected: dict[str, Any], actual: dict[str, Any], limit: int = 40) -> list[str]:
    """Readable lines, one per difference (missing, extra or changed entry), at most ``limit`` of them
    and a count of the rest; [] when the records are equal."""
    if expected == actual:
        return []
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(expected, "", a)
    _flatten(actual, "", b)
    lines = []
    for key in sorted(set(a) | set(b)):
        if key not in b:
            lines.append(f"missing  {key}: recorded {_short(a[key])}")
        elif key not in a:
            lines.append(f"extra    {key}: now {_short(b[key])}")
        elif a[key] != b[key]:
            lines.append(f"changed  {key}:\n           recorded {_short(a[key])}\n           now      {_short(b[key])}")
    more = len(lines) - limit
    return lines[:limit] + ([f"... and {more} more"] if more > 0 else [])


def _short(value: Any, width: int = 400) -> str:
    text = json.dumps(_readable(value), ensure_ascii=False)
    return text if len(text) <= width else text[:width] + "…"


def _readable(value: Any) -> Any:
    """Hex floats shown with their decimal value too."""
    if isinstance(value, str) and value.startswith(("0x", "-0x")) and "p" in value:
        try:
            return f"{float.fromhex(value)!r} ({value})"
        except ValueError:
            return value
    if isinstance(value, list):
        return [_readable(v) for v in value]
    return value


def load(path: Path = RECORD) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def dump(record_: dict[str, Any], path: Path = RECORD) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_pretty(record_) + "\n", encoding="utf-8")


def _pretty(value: Any, depth: int = 0, width: int = 160) -> str:
    """JSON with sorted keys, a container on one line when it fits in ``width`` characters or is a list
    of plain values, else one member a line (small files, readable diffs)."""
    compact = json.dumps(value, sort_keys=True, ensure_ascii=False)
    flat = isinstance(value, list) and not any(isinstance(v, (dict, list)) for v in value)
    if len(compact) <= width or flat or not isinstance(value, (dict, list)) or not value:
        return compact
    pad = " " * (depth + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {_pretty(value[k], depth + 1, width)}" for k in sorted(value)]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    items = [f"{pad}{_pretty(v, depth + 1, width)}" for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * depth + "]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RECORD, help="where to write the record (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    parser.add_argument("--parts", nargs="*", choices=PARTS, help="only these parts (default: all)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    now = record(args.parts, log=lambda line: print(line, flush=True))
    print(f"total {time.perf_counter() - start:.1f} s")
    if args.check:
        expected = load(args.out)
        if args.parts:
            expected = {**expected, "parts": {p: expected["parts"].get(p) for p in args.parts}}
        lines = differences(expected, now)
        print("\n".join(lines) if lines else f"same as {args.out}")
        return 1 if lines else 0
    if args.parts and Path(args.out).is_file():  # re-record some parts: the others stay as they were recorded
        kept = load(args.out)
        now = {**kept, **{k: v for k, v in now.items() if k != "parts"},
               "parts": {**kept.get("parts", {}), **now["parts"]}}
    dump(now, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
