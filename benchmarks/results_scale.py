"""The results side at scale (issue 38): report, every export and the leaderboard of a store the size users make.

    python benchmarks/results_scale.py [--sizes 500,2000] [--models 4] [--corruptions 15] [--no-evaluate]
                                       [--label during] [--json benchmarks/results/results_scale.json]
    python benchmarks/results_scale.py --full [--step-timeout 900] [--json ...]   # 50,000 images x 76 x 10 models
    python benchmarks/results_scale.py --quick [--json OUT]   # a smoke run: never writes benchmarks/results/
    python benchmarks/results_scale.py --show --json benchmarks/results/results_scale.json   # its tables again

A synthetic store is filled for each size without shifting an image or running a model: through the store's
own writer (``Store.start_run``, ``condition``, ``save_batch`` per batch of 64, ``finish_condition``,
``finish_run``), with the rows, batch states, per-sample records, grid predictions and thumbnails a real
``evaluate`` of this spec writes: ``dummy_classifier`` x ``--models`` seeds on an image folder of 10 classes,
clean + the 15 ImageNet-C corruptions x 5 severities (76 conditions), top1 + ece. The numbers come from the
real metric classes (``top1``, ``ece``) fed with synthetic logits whose accuracy falls with severity (clean
about 0.76, severity 5 about 0.3, varying per corruption and model; images have a shared difficulty, so
models and conditions agree on hard images as real ones do) and whose confidences are overconfident the way
classifiers are; deterministic from ``--seed``.

Each step then runs in a FRESH process (the ``shiftbench`` CLI of this interpreter, so ``PYTHONPATH``
decides which code runs; the first lines say which), timed by the wall clock, its peak RSS read from
``os.wait4`` (``ru_maxrss`` of that child): ``report`` (HTML into a temp folder), ``export`` for every format
of ``shiftbench.report.export.FORMATS`` (output size; bytes a line of ``samples.jsonl``), ``leaderboard`` of
the one store. With ``--evaluate`` (default without ``--quick`` and ``--full``) a real ``shiftbench evaluate``
of the same spec runs on an image folder of 64 px photos (``scale.small_photo_folder``) at every size: the
driver's time and peak RSS and its store's bytes a prediction. A step running past ``--step-timeout``
seconds is killed and reported as such. The table: one column per size and the growth from the smallest to
the largest (time and peak RSS ratios); ``--full`` adds the goal check (each step within 600 s and 2 GB).
The store's bytes a prediction count its fixed part too (304 thumbnails, about 5 MB); the growth column gives
the bytes each prediction more adds. ``samples.jsonl`` is one line per sample, condition and metric: its bytes
a line and a prediction (two lines) are both given. ``--json`` keeps one entry per ``--label`` (default
``scale``, ``full`` or ``quick``), so a run of older code (``PYTHONPATH=<checkout>/src``) sits beside it;
``--keep DIR`` keeps the stores and outputs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
if not os.environ.get("PYTHONPATH"):  # PYTHONPATH (e.g. an older checkout's src) decides the code measured
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

LABELS = [f"c{c}" for c in range(10)]
SEVERITIES = [1, 2, 3, 4, 5]
BATCH = 64
GRID = 4  # per condition: thumbnails and every model's prediction of the first GRID samples (engine/kernel.py)
GOAL_S, GOAL_MB = 600.0, 2048.0  # issue 38's goal at full size, per step
CLI = "import sys; from shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
# how hard each ImageNet-C corruption is for the synthetic models: the share of clean accuracy lost at severity 5
DROP = {"gaussian_noise": 0.72, "shot_noise": 0.74, "impulse_noise": 0.75, "defocus_blur": 0.68, "glass_blur": 0.78,
        "motion_blur": 0.62, "zoom_blur": 0.66, "snow": 0.64, "frost": 0.58, "fog": 0.50, "brightness": 0.22,
        "contrast": 0.80, "elastic_transform": 0.55, "pixelate": 0.70, "jpeg_compression": 0.52}


# -- the spec and what it names ------------------------------------------------------------------------------
def corruption_names(count: int) -> list[str]:
    from shiftbench.engine.generate import resolve_shifts

    names = resolve_shifts(["common"])
    return names[:count]


def bench_spec(dataset: str, models: int, corruptions: int) -> dict[str, Any]:
    """The spec of /tmp/rs/mk.py: dummy_classifier x ``models`` seeds, clean + corruptions x 5, top1 + ece."""
    names = corruption_names(corruptions)
    shifts: list[Any] = ["clean"]
    if corruptions == len(corruption_names(99)):
        shifts.append({"name": "common", "severities": SEVERITIES})
    else:
        shifts += [{"name": name, "severities": SEVERITIES} for name in names]
    return {"name": "results_scale", "dataset": dataset, "seed": 0, "batch_size": BATCH,
            "models": [{"name": "dummy_classifier", "params": {"label_space": LABELS, "seed": s}} for s in range(models)],
            "metrics": ["top1", "ece"], "shifts": shifts}


def image_ids(n: int) -> list[str]:
    """The ids of an image folder of ``n`` photos in 10 class folders (``c3/img00123.png``), in the folder
    reader's order (class folder, then file name), as ``scale.small_photo_folder`` writes them."""
    width = max(5, len(str(n - 1)))
    return [f"c{c}/img{i:0{width}d}.png" for c in range(10) for i in range(c, n, 10)]


# -- synthetic predictions ------------------------------------------------------------------------------------
class Synthetic:
    """Deterministic logits of ``models`` classifiers on ``n`` images under each condition.

    Accuracy: model m's clean accuracy (about 0.76, +-0.05 between models) times 1 - DROP[shift] * (s/5)^1.3 at
    severity s (a few points of noise per model and condition). Each image has one difficulty shared by every
    model and condition; a sample is right when its (correlated) draw is below its chance of being right, and the
    top-1 confidence is that chance pushed towards 1 (more so at higher severity: classifiers grow overconfident
    under shift). The logits put exactly that confidence on the predicted class (the label when right, another
    class when wrong)."""

    def __init__(self, n: int, models: int, seed: int):
        self.n, self.seed = n, seed
        rng = np.random.default_rng([seed, 0])
        self.difficulty = rng.standard_normal(n)
        self.clean = 0.76 + np.round(rng.uniform(-0.05, 0.05, models), 3)

    def accuracy(self, model: int, shift: str, severity: int, cond: int) -> float:
        jitter = np.random.default_rng([self.seed, 1, model, cond]).uniform(-0.04, 0.04)
        base = self.clean[model]
        if shift == "clean":
            return float(base)
        drop = DROP.get(shift, 0.6) + jitter
        return float(np.clip(base * (1 - drop * (severity / 5) ** 1.3), 0.02, 0.98))

    def logits(self, labels: np.ndarray, model: int, shift: str, severity: int, cond: int) -> np.ndarray:
        """float32 (n, 10) logits of ``model`` under condition number ``cond``."""
        rng = np.random.default_rng([self.seed, 2, model, cond])
        acc = self.accuracy(model, shift, severity, cond)
        n = len(labels)
        # chance of being right: logistic, spread per sample (hard images lower), centred so its mean is acc
        spread = 1.6 * (0.6 * -self.difficulty[:n] + 0.8 * rng.standard_normal(n))
        lo, hi = -12.0, 12.0
        for _ in range(40):  # bisection: the mean chance grows with the offset
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if np.mean(1 / (1 + np.exp(-(mid + spread)))) < acc else (lo, mid)
        logit = lo + spread
        chance = 1 / (1 + np.exp(-logit))
        # right or wrong by a draw correlated with the image's difficulty, so models agree on hard images
        draw = 0.5 * self.difficulty[:n] + 0.866 * rng.standard_normal(n)
        right = 1 / (1 + np.exp(-1.702 * draw)) < chance  # the draw's normal CDF (logistic approximation)
        # top-1 confidence: the chance of being right pushed towards 1, more so at higher severity
        confidence = np.clip(1 / (1 + np.exp(-(logit + 0.2 + 0.12 * severity))), 0.2, 0.99995)
        wrong = (labels + rng.integers(1, 10, n)) % 10
        top = np.where(right, labels, wrong)
        others = rng.normal(0.0, 0.25, (n, 10))
        others[np.arange(n), top] = -np.inf
        rest = np.exp(others).sum(axis=1)  # softmax mass of the other classes, before the top logit is set
        logits = others
        logits[np.arange(n), top] = np.log(confidence * rest / (1 - confidence))
        return logits.astype(np.float32)


def thumbnail(shift: str, severity: int, i: int, seed: int) -> bytes:
    """A 96 px PNG about the size of a real grid thumbnail (a photo's): smooth shapes plus noise."""
    import cv2

    rng = np.random.default_rng([seed, 3, i, severity, sum(map(ord, shift))])
    y, x = np.mgrid[0:96, 0:96] / 96.0
    base = np.stack([np.sin(x * (3 + c) + y * (2 + i % 5) + c) for c in range(3)], axis=2) * 80 + 128
    image = base + rng.normal(0, 1 + 1.5 * severity, base.shape)
    ok, png = cv2.imencode(".png", np.clip(image, 0, 255).astype(np.uint8))
    return png.tobytes()


# -- the filler -----------------------------------------------------------------------------------------------
def fill_store(path: Path, n: int, models: int = 4, corruptions: int = 15, seed: int = 0,
               keep: bool = False, thumbs: bool = True) -> dict[str, Any]:
    """Fill a store at ``path`` as a real evaluate of ``bench_spec`` on ``n`` images writes it (module doc).

    Returns a summary (run id, conditions, predictions, seconds); with ``keep``, also ``written``: every
    per-sample record handed to the store, by (model, shift, severity, metric) -> (kind, ids, values)."""
    from shiftbench.engine.identity import package_version
    from shiftbench.engine.kernel import batch_states, sample_records
    from shiftbench.engine.provenance import git_hash, versions
    from shiftbench.engine.spec import load_spec
    from shiftbench.registry import METRICS, metric_info
    from shiftbench.results.artifacts import thumb_key
    from shiftbench.results.codec import encode_state
    from shiftbench.results.store import Store, params_key
    from shiftbench.tasks.classification import Classification

    start = time.perf_counter()
    dataset = str(path.parent / f"photos{n}")
    raw = bench_spec(dataset, models, corruptions)
    spec = load_spec(raw, check_names=False)
    conditions = spec.conditions()  # model-major, as the runner creates them
    labels_of = [m.label or m.name for m in spec.models]
    ids = image_ids(n)
    labels = np.array([int(sid[1:sid.index("/")]) for sid in ids])

    identity = {
        "shiftbench": package_version("shiftbench"),
        "dataset": {"name": dataset, "root": {"bytes": 9000 * n, "files": n,
                                              "sha256": hashlib.sha256(f"{seed}:{n}".encode()).hexdigest()},
                    "samples": n, "sample_ids": hashlib.sha256("\n".join(ids).encode()).hexdigest()},
        "ids": None,
        "models": {label: {"from": "none", "weights": None} for label in labels_of},
    }
    synthetic = Synthetic(n, models, seed)
    task = Classification()
    space = SimpleNamespace(class_names=LABELS)
    names = list(spec.metrics)
    per_model = len(conditions) // models
    written: dict[tuple, tuple[str, list[str], np.ndarray]] = {}
    n_batches = (n + BATCH - 1) // BATCH
    with Store(path) as store:
        run_id = store.start_run(spec.raw, spec.seed, versions=versions(), git_hash=git_hash(ROOT), name=spec.name,
                                 identity=identity)
        cids = [store.condition(run_id, c) for c in conditions]
        for ci in range(per_model):  # a condition's batch is loaded once and scored by every model, as run_local does
            cond = conditions[ci]
            logits = [synthetic.logits(labels, m, cond.shift, int(cond.severity), ci) for m in range(models)]
            totals = [{name: METRICS.create(name) for name in names} for _ in range(models)]
            for b in range(n_batches):
                part = slice(b * BATCH, min(n, (b + 1) * BATCH))
                samples = [SimpleNamespace(id=sid, label=int(lab)) for sid, lab in zip(ids[part], labels[part])]
                if b == 0 and thumbs:
                    for i, s in enumerate(samples[:GRID]):
                        store.put_artifact(run_id, thumb_key(cond.shift, params_key(cond.params), cond.severity, s.id),
                                           thumbnail(cond.shift, int(cond.severity), i, seed),
                                           {"label": s.label, "class_name": LABELS[s.label], "shift": cond.shift,
                                            "params_key": params_key(cond.params), "severity": cond.severity,
                                            "sample_id": s.id})
                for m in range(models):
                    scores, targets = logits[m][part], labels[part]
                    parts = {name: METRICS.create(name) for name in names}
                    for name in names:
                        parts[name].update(scores, targets)
                        totals[m][name].update(scores, targets)  # exact sums: the same as merging the batches
                    states = batch_states({name: encode_state(parts[name].state_dict()) for name in names}, samples, [])
                    predictions = [(s.id, task.record(scores, i, s, None, space)) for i, s in enumerate(samples[:GRID])] \
                        if b == 0 else None
                    store.save_batch(cids[m * per_model + ci], b, states, predictions=predictions)
            for m in range(models):  # engine/kernel.py finish_held, with no sample skipped
                results: dict[str, Any] = {}
                records: dict[str, Any] = {}
                for name in names:
                    metric = totals[m][name]
                    values = metric.compute()
                    values = values if isinstance(values, dict) else {name: values}
                    extra = json.loads(json.dumps(metric.state())) if hasattr(metric, "state") else {}
                    for i, (key, value) in enumerate(values.items()):
                        info = {"higher_is_better": metric_info(metric).higher_is_better, "metric": name}
                        if i == 0 and extra:
                            info.update(extra)
                        results[key] = (None if value is None or not np.isfinite(value) else float(value), n, info)
                    records.update(sample_records(metric, ids))
                store.finish_condition(cids[m * per_model + ci], results, n=n, samples=records)
                if keep:
                    for metric, record in records.items():
                        written[(labels_of[m], cond.shift, int(cond.severity), metric)] = record
        store.finish_run(run_id)
    out = {"run_id": run_id, "images": n, "models": models, "conditions": per_model,
           "predictions": n * len(conditions), "fill_s": time.perf_counter() - start}
    if keep:
        out["written"] = written
    return out


def db_bytes(path: Path) -> int:
    """The store's size on disk: the database and any write-ahead log or journal beside it."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def count_lines(path: Path) -> int:
    lines = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            lines += chunk.count(b"\n")
    return lines


# -- measuring a fresh process --------------------------------------------------------------------------------
def measure(args: list[str], log: Path, timeout: float) -> dict[str, Any]:
    """Run ``shiftbench ARGS`` in a fresh process of this interpreter: wall seconds and its peak RSS (MB);
    killed (with its process group) past ``timeout`` seconds."""
    with open(log, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", CLI, *args], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    row: dict[str, Any] = {"seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024, "rc": proc.returncode}
    if timed_out:
        row["timed_out"] = True
    elif proc.returncode:
        row["error"] = log.read_text(errors="replace")[-2000:]
    return row


def which_code() -> str:
    """Where a fresh process of this interpreter imports shiftbench from (the code every step measures)."""
    out = subprocess.run([sys.executable, "-c", "import shiftbench; print(shiftbench.__file__)"],
                         capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip()[-300:]


def export_formats() -> list[str]:
    from shiftbench.report.export import FORMATS

    order = ["results", "jsonl", "parquet", "robustbench"]  # the order; a new format after them
    return sorted(FORMATS, key=lambda f: (order.index(f) if f in order else len(order), f))


def bench_size(work: Path, n: int, models: int, corruptions: int, seed: int, evaluate: bool,
               timeout: float, formats: list[str]) -> dict[str, Any]:
    """Every step at ``n`` images: fill a store, then each step in a fresh process."""
    folder = work / f"n{n}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"photos{n}").mkdir(exist_ok=True)  # the dataset the spec names (a real run's folder)
    store = folder / "synthetic.db"
    filled = fill_store(store, n, models, corruptions, seed)
    predictions = filled["predictions"]
    out: dict[str, Any] = {"images": n, "models": models, "conditions": filled["conditions"],
                           "predictions": predictions, "fill_s": filled["fill_s"]}
    size = db_bytes(store)
    out["store"] = {"bytes": size, "bytes_per_prediction": size / predictions}
    steps: list[tuple[str, list[str], Path]] = [("report", ["report", "--store", str(store), "--out"], folder / "report")]
    steps += [(f"export {fmt}", ["export", "--store", str(store), "--format", fmt, "--out"], folder / f"export-{fmt}")
              for fmt in formats]
    steps.append(("leaderboard", ["leaderboard", str(store), "--out"], folder / "leaderboard"))
    if evaluate:
        out["evaluate"] = bench_evaluate(folder, n, models, corruptions, timeout)
    for name, args, target in steps:
        row = measure([*args, str(target)], folder / f"{name.replace(' ', '-')}.log", timeout)
        row["output_bytes"] = tree_bytes(target)
        jsonl = target / "samples.jsonl"
        if name == "export jsonl" and jsonl.exists() and not row.get("timed_out"):
            row["lines"] = count_lines(jsonl)
            row["file_bytes"] = jsonl.stat().st_size
            row["bytes_per_line"] = row["file_bytes"] / max(1, row["lines"])
        out[name] = row
        print(f"  {n} images: {name}: {cell(row)}", flush=True)
    return out


def bench_evaluate(folder: Path, n: int, models: int, corruptions: int, timeout: float) -> dict[str, Any]:
    """A real ``shiftbench evaluate`` of the spec on ``n`` 64 px photos: the driver's time and peak RSS."""
    import yaml

    from scale import small_photo_folder

    photos = small_photo_folder(folder / "eval-photos", n, size=64)
    spec_file = folder / "eval-spec.yaml"
    spec_file.write_text(yaml.safe_dump(bench_spec(str(photos), models, corruptions), sort_keys=False))
    store = folder / "evaluate.db"
    row = measure(["evaluate", "--config", str(spec_file), "--store", str(store)], folder / "evaluate.log", timeout)
    predictions = n * models * (1 + len(SEVERITIES) * corruptions)
    row["store_bytes"] = db_bytes(store)
    row["bytes_per_prediction"] = row["store_bytes"] / predictions
    print(f"  {n} images: evaluate: {cell(row)}; store {row['store_bytes'] / 1e6:.1f} MB", flush=True)
    return row


# -- the table ------------------------------------------------------------------------------------------------
def cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    if row.get("timed_out"):
        return f"killed at {row['seconds']:.0f} s"
    if row.get("rc"):
        return f"FAILED (exit {row['rc']})"
    return f"{row['seconds']:.1f} s, {row['peak_rss_mb']:.0f} MB"


def ratio(a: float, b: float) -> str:
    return f"{b / a:.1f}x" if a > 0 else "-"


def size_text(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def growth(first: dict[str, Any] | None, last: dict[str, Any] | None) -> tuple[str, str]:
    ok = first is not last and all(r is not None and not r.get("rc") and not r.get("timed_out") for r in (first, last))
    if not ok:
        return "-", "-"
    return ratio(first["seconds"], last["seconds"]), ratio(first["peak_rss_mb"], last["peak_rss_mb"])


def marginal(first: dict[str, Any], last: dict[str, Any]) -> float:
    """Bytes each prediction more adds to the synthetic store (its fixed part, the thumbnails, left out)."""
    more = last["predictions"] - first["predictions"]
    return (last["store"]["bytes"] - first["store"]["bytes"]) / more if more else float("nan")


def table(sizes: list[dict[str, Any]], formats: list[str]) -> list[str]:
    """One Markdown table: one column per size, the growth from the first size to the last."""
    first, last = sizes[0], sizes[-1]
    lines = ["| step | " + " | ".join(f"{s['images']:,} images" for s in sizes) + " | growth time | growth RSS |",
             "|---|" + "---:|" * len(sizes) + "---:|---:|"]

    def add(name: str, cells: list[str], grow: tuple[str, str]) -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {grow[0]} | {grow[1]} |")

    if "evaluate" in first:
        add("evaluate", [cell(s["evaluate"]) for s in sizes], growth(first["evaluate"], last["evaluate"]))
        add("store (evaluate)", [f"{size_text(s['evaluate']['store_bytes'])}, "
                                 f"{s['evaluate']['bytes_per_prediction']:.0f} B a prediction" for s in sizes],
            (ratio(first["evaluate"]["store_bytes"], last["evaluate"]["store_bytes"]) + " bytes"
             if len(sizes) > 1 else "-", "-"))
    add("store (synthetic)", [f"{size_text(s['store']['bytes'])}, {s['store']['bytes_per_prediction']:.0f} B a "
                              "prediction" for s in sizes],
        (f"{ratio(first['store']['bytes'], last['store']['bytes'])} bytes, {marginal(first, last):.0f} B a prediction "
         "more" if len(sizes) > 1 else "-", "-"))
    for name in ["report", *(f"export {f}" for f in formats), "leaderboard"]:
        cells = []
        for s in sizes:
            row = s.get(name)
            text = cell(row)
            if row and "bytes_per_line" in row:
                text += (f"; {size_text(row['file_bytes'])} file, {row['bytes_per_line']:.0f} B a line, "
                         f"{row['file_bytes'] / s['predictions']:.0f} B a prediction")
            elif row and row.get("output_bytes") and not row.get("rc"):
                text += f"; {size_text(row['output_bytes'])} out"
            cells.append(text)
        add(name if name != "leaderboard" else "leaderboard (one store)", cells, growth(first.get(name), last.get(name)))
    return lines


def goal_table(size: dict[str, Any], formats: list[str]) -> list[str]:
    """The full size against issue 38's goal: each step within 600 s and 2 GB peak RSS."""
    lines = [f"Goal at {size['images']:,} images x {size['conditions']} conditions x {size['models']} models "
             f"({size['predictions']:,} predictions): each step within {GOAL_S:.0f} s and {GOAL_MB / 1024:.0f} GB",
             "| step | time | peak RSS | goal |", "|---|---:|---:|---|"]
    for name in ["report", *(f"export {f}" for f in formats), "leaderboard"]:
        row = size.get(name)
        if row is None:
            continue
        if row.get("timed_out") or row.get("rc"):
            lines.append(f"| {name} | {cell(row)} | {row['peak_rss_mb']:.0f} MB | not met |")
            continue
        met = row["seconds"] <= GOAL_S and row["peak_rss_mb"] <= GOAL_MB
        lines.append(f"| {name} | {row['seconds']:.0f} s | {row['peak_rss_mb']:.0f} MB | {'met' if met else 'not met'} |")
    lines.append(f"store: {size_text(size['store']['bytes'])}, {size['store']['bytes_per_prediction']:.0f} B a "
                 f"prediction (goal: at most 100)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None, help="Image counts, comma separated (default 500,2000; "
                        "--quick 20; --full 50000).")
    parser.add_argument("--models", type=int, default=None, help="dummy_classifier seeds (default 4; --quick 2; "
                        "--full 10).")
    parser.add_argument("--corruptions", type=int, default=None,
                        help="ImageNet-C corruptions x 5 severities besides clean (default 15: 76 conditions; --quick 1).")
    parser.add_argument("--full", action="store_true", help="The issue's goal size: 50,000 images x 76 conditions "
                        "x 10 models, checked against 600 s and 2 GB a step.")
    parser.add_argument("--quick", action="store_true", help="A smoke run: 20 images x 6 conditions x 2 models.")
    parser.add_argument("--evaluate", action=argparse.BooleanOptionalAction, default=None,
                        help="Also a real evaluate at every size (default: on, off with --quick or --full).")
    parser.add_argument("--step-timeout", type=float, default=900.0, help="Seconds before a step is killed.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default=None, help="The entry of the JSON file these results go to "
                        "(default: scale, full or quick); others are kept.")
    parser.add_argument("--keep", default=None, help="Work in this folder and keep its stores and outputs.")
    parser.add_argument("--json", default=None, help="Also write the results to this JSON file (entries of other "
                        "labels kept; with --quick: not under benchmarks/results/).")
    parser.add_argument("--show", action="store_true", help="Print the tables of every entry of --json and stop "
                        "(nothing is measured).")
    args = parser.parse_args()
    if args.show:
        if not args.json or not Path(args.json).is_file():
            parser.error("--show prints the entries of a --json file: give one that exists")
        for label, entry in json.loads(Path(args.json).read_text()).items():
            print(f"{label}: {entry['code']}, {entry['machine']}, load average {entry['load_before']:.1f} before, "
                  f"{entry['load_after']:.1f} after")
            print("\n".join(table(entry["sizes"], entry["formats"])) + "\n")
        return
    if args.quick and args.json is not None and Path(args.json).resolve().is_relative_to(RESULTS_DIR.resolve()):
        parser.error("--quick never writes the committed results file; give another --json or none")
    if args.quick and args.full:
        parser.error("--quick and --full are two different sizes; give one")
    mode = "quick" if args.quick else "full" if args.full else "scale"
    sizes = [int(x) for x in (args.sizes or {"quick": "20", "full": "50000", "scale": "500,2000"}[mode]).split(",")]
    models = args.models or {"quick": 2, "full": 10, "scale": 4}[mode]
    corruptions = args.corruptions if args.corruptions is not None else (1 if args.quick else 15)
    evaluate = args.evaluate if args.evaluate is not None else mode == "scale"
    if any(n < 1 for n in sizes) or models < 1 or not 0 <= corruptions <= 15:
        parser.error("--sizes and --models must be positive, --corruptions 0 to 15")
    formats = export_formats()
    code = which_code()
    load_before = os.getloadavg()
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {load_before[0]:.1f} {load_before[1]:.1f} {load_before[2]:.1f}")
    print(f"code measured: {code}")
    print(f"{models} models x {1 + 5 * corruptions} conditions x sizes {', '.join(map(str, sizes))}; "
          f"export formats: {', '.join(formats)}; evaluate: {'yes' if evaluate else 'no'}", flush=True)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="shiftbench-results-scale-"))
    try:
        runs = [bench_size(work, n, models, corruptions, args.seed, evaluate, args.step_timeout, formats)
                for n in sizes]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    print()
    print(f"{models} models (dummy_classifier seeds) x {runs[0]['conditions']} conditions, top1 + ece; "
          f"fresh process a step; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    lines = table(runs, formats)
    if mode == "full":
        lines += [""] + goal_table(runs[-1], formats)
    print("\n".join(lines))
    for r in runs:
        print(f"filled {r['predictions']:,} predictions in {r['fill_s']:.1f} s ({r['images']:,} images)")
    failed = [f"{r['images']} images: {name}" for r in runs for name, row in r.items()
              if isinstance(row, dict) and row.get("rc") and not row.get("timed_out")]
    if args.json:
        target = Path(args.json)
        results = json.loads(target.read_text()) if target.exists() else {}
        results[args.label or mode] = {
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs", "python": platform.python_version(),
            "code": code, "load_before": load_before[0], "load_after": load_after[0],
            "models": models, "conditions": runs[0]["conditions"], "formats": formats,
            "step_timeout_s": args.step_timeout, "sizes": runs, "table": lines}
        target.write_text(json.dumps(results, indent=1) + "\n")
    if failed:
        for r in runs:
            for name, row in r.items():
                if isinstance(row, dict) and row.get("error"):
                    print(f"\n{r['images']} images, {name} failed:\n{row['error']}", file=sys.stderr)
        raise SystemExit(f"failed: {'; '.join(failed)}")


if __name__ == "__main__":
    main()
