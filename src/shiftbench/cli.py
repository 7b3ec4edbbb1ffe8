"""The ``shiftbench`` command: list, env, evaluate, generate, curate, report, export, leaderboard, demo, train-retriever.

User mistakes (unknown names, malformed specs, missing or unreadable files) end with one line on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from .console import Steps, make_console, plural, print_table
from .demo import run_demo
from .engine import DEFAULT_SHARD
from .engine.cluster import token_auth
from .engine.curate import curate
from .engine.engines import check_reachable, import_ray
from .engine.evaluate import evaluate, prepare
from .engine.generate import GenerateOptions, generate, parse_severities, resolve_shifts
from .engine.provenance import environment
from .engine.spec import PIXELS, load_spec
from .errors import ShiftbenchError
from .files import out_folder, write_atomic
from .models.retrieval import CHECKPOINT_NAME, cache_dir
from .models.retrieval_training import train_retrievers
from .registry import DATASETS, METRICS, MODELS, SHIFTS, shift_info, summary_line
from .report import build_report, run_headline
from .report.export import export_store
from .report.leaderboard import leaderboard, to_markdown, write_leaderboard
from .report.terminal import print_headline
from .report.headline import planned_detectable
from .results.store import Store, spec_hash
from .seeds import parse_seed

KINDS = ("shifts", "models", "datasets", "metrics")


class SeedParam(click.ParamType):
    """A ``--seed`` option: an integer 0 <= seed < 2**63 (seeds.py), the domain of the spec and the store.

    A bad one raises the SeedError itself (not click's usage block), so that it ends, like every user
    mistake, as one line and exit status 2."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        return parse_seed(value, param.opts[0] if param is not None and param.opts else "--seed")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shiftbench")
def cli() -> None:
    """Stress-test vision and vision-language models with controlled, label-preserving shifts."""
    import os

    # shiftbench reports its own progress; the hub libraries' weight-loading bars (transformers, diffusers,
    # huggingface_hub) would print 0-100% lines into the user's terminal or log. Set it to 0 to see them.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    _log_to_stderr()


class _EchoHandler(logging.Handler):
    """Log records of shiftbench as one plain ``warning: ...`` line on stderr (no source line, no traceback)."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"{record.levelname.lower()}: {record.getMessage()}", err=True)


def _log_to_stderr() -> None:
    logger = logging.getLogger("shiftbench")
    if not any(isinstance(h, _EchoHandler) for h in logger.handlers):
        handler = _EchoHandler(logging.WARNING)
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)


# -- list ---------------------------------------------------------------------------------------
@cli.command("list")
@click.argument("kind", type=click.Choice(KINDS + ("all",)), default="all")
@click.argument("pattern", required=False)
@click.option("--names", is_flag=True, help="Print bare names, one per line.")
def list_cmd(kind: str, pattern: str | None, names: bool) -> None:
    """List registered shifts, models, datasets or metrics (PATTERN is a glob, e.g. '*blur*')."""
    from rich.table import Table

    registries = {"shifts": SHIFTS, "models": MODELS, "datasets": DATASETS, "metrics": METRICS}
    kinds = KINDS if kind == "all" else (kind,)
    found = {k: registries[k].entries(pattern) for k in kinds}
    if pattern and not any(found.values()):  # a pattern that matches nothing is a mistake, not an empty table
        if kind == "all":
            raise ShiftbenchError(f"nothing matches {pattern!r} (shifts, models, datasets, metrics)")
        raise ShiftbenchError(registries[kind].no_match_message(pattern))
    console = make_console()
    for k in kinds:
        entries = found[k]
        if pattern and not entries:  # `list all PATTERN`: only the kinds it matches
            continue
        if names:
            for e in entries:
                click.echo(e.name)
            continue
        table = Table(title=f"{k} ({len(entries)})", title_justify="left", show_lines=False)
        table.add_column("name", style="bold")
        table.add_column("group / details")
        table.add_column("description")
        for e in entries:
            details = _details(e.meta) + (_severity_range(e) if k == "shifts" else "")
            table.add_row(e.name, details, summary_line(e.description))
        print_table(console, table)


def _severity_range(entry: Any) -> str:
    """`` severities 1-5`` for a shift's registered class, ``1-5 (dial)`` where any real severity works."""
    target = entry.target if isinstance(entry.target, type) else None
    if target is None or not hasattr(target, "severities"):
        return ""
    lo, hi = target.severities
    if lo == hi:
        return ""
    return f" severities {lo}-{hi}{' (dial)' if getattr(target, 'continuous', False) else ''}"


def _details(meta: dict[str, Any]) -> str:
    parts = []
    for key in ("group", "task", "size", "annotations", "backend", "severities"):
        if key in meta and meta[key] not in (None, "", [], ()):
            value = meta[key]
            if isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            parts.append(f"{key}={value}" if key != "group" else str(value))
    return " ".join(parts)


# -- env ----------------------------------------------------------------------------------------
@cli.command("env")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def env_cmd(as_json: bool) -> None:
    """Versions, devices and which optional backends are importable."""
    info = environment(devices=True)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    from rich.table import Table

    table = Table(title="shiftbench environment", title_justify="left")
    table.add_column("item", style="bold")
    table.add_column("value")
    for key in ("shiftbench", "python", "platform", "git"):
        table.add_row(key, str(info.get(key)))
    for name, version in info["packages"].items():
        table.add_row(name, version or "[dim]not installed[/dim]")
    table.add_row("devices", ", ".join(info["devices"]))
    make_console().print(table)


# -- evaluate -----------------------------------------------------------------------------------
@cli.command("evaluate")
@click.option("--config", "config", type=click.Path(dir_okay=False), required=True, help="Benchmark spec (YAML).")
@click.option("--store", type=click.Path(dir_okay=False), default=None, help="Results database (SQLite).")
@click.option("--results-json", type=click.Path(dir_okay=False), default=None, help="Also write the rows here.")
@click.option("--dry-run", is_flag=True,
              help="Set the run up without running it: open the dataset, load every model and mask provider/"
                   "captioner, check the store; print the plan. Fails with the message the run would give.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N samples.")
@click.option("--log-samples", is_flag=True, help="Store per-sample predictions.")
@click.option("--run-id", default=None, help="Name of the run in the store (default: from the spec).")
@click.option("--on-error", type=click.Choice(["fail", "skip"]), default=None,
              help="Unreadable images: fail (default) or skip them (logged, recorded in the store as skipped.json). "
                   "Overrides the spec's on_error.")
@click.option("--new-run", is_flag=True,
              help="Start a new run when the spec's run exists with other inputs (weights, data, ids, version); "
                   "unchanged inputs resume their run (said in one line), --run-id NAME makes a separate one.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default=None,
              help="local: this process (default); ray: (condition, shard) units on Ray actors holding the models. "
                   "Overrides the spec's engine; the rows are the same either way.")
@click.option("--address", default=None,
              help="Ray cluster to join (HOST:PORT of its head); default: start a local one on --workers CPUs.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="CPUs of the local Ray cluster the ray engine starts (default: all).")
@click.option("--shard-size", type=click.IntRange(min=1), default=None,
              help=f"Samples per unit of the ray engine (whole batches; default {DEFAULT_SHARD}).")
@click.option("--pixels", type=click.Choice(PIXELS), default=None,
              help="Where corruptions run: auto (default: on the models' GPU when every model is a torch "
                   "classifier there), device (the models' device, whatever it is) or cpu.")
def evaluate_cmd(config: str, store: str | None, results_json: str | None, dry_run: bool, run_id: str | None,
                 new_run: bool, **engine: Any) -> None:
    """Run a benchmark spec: models x (clean + shifts x severities) -> metrics in the store (``engine``: the
    run options --limit, --log-samples, --on-error and the engine's --engine, --address, --workers,
    --shard-size, --pixels)."""
    run = {"limit": engine.pop("limit"), "log_samples": engine.pop("log_samples") or None,
           "on_error": engine.pop("on_error")}
    spec = load_spec(config).with_run(**run).with_engine(name=engine.pop("engine"), **engine)
    store = store or str(Path(config).with_suffix(".db").name)
    if dry_run:
        _dry_run(spec, store, run_id, new_run)
        return

    opened: list[Any] = []  # the run as evaluate found it in the store (engine.evaluate.RunStart)
    rows = evaluate(spec, store=store, run_id=run_id, progress=True, new_run=new_run, on_start=opened.append)
    if results_json:
        _write_json_atomic(Path(results_json), rows)
    _print_found(spec, store, rows, opened[0] if opened else None, results_json)


def _print_found(spec, store: str, rows: list[dict[str, Any]], opened: Any, results_json: str | None) -> None:
    """What a finished run found, as its last lines: the engine used, the resumed work, the run's headline (the
    report's own, from the store), where the rows are and the commands that go further."""
    import shlex

    console = make_console()

    def say(text: str) -> None:
        console.print(text, soft_wrap=True, markup=False)

    say(_engine_line(spec.engine))
    run_id = opened.run_id if opened is not None else (rows[0]["run_id"] if rows else None)
    if opened is not None and opened.resumed:
        left = "nothing left to compute" if opened.done >= opened.planned else "the rest computed now"
        say(f"resumed: {opened.done} of {plural(opened.planned, 'condition')} already done ({left})"
            + (f"; --new-run: the inputs equal those of run {run_id}, so it was resumed rather than computed again "
               "(--run-id NAME starts a separate run)" if opened.same_inputs else ""))
    _print_headline(console, store, run_id)
    say(f"{plural(len(rows), 'result row')} of run {run_id} in {store}" + (f" and {results_json}" if results_json else ""))
    with Store(store, create=False) as db:
        several = len(db.runs()) > 1
    quoted = shlex.quote(str(store))
    pick = f" --run-id {shlex.quote(str(run_id))}" if several and run_id else ""
    say(f"next: shiftbench report --store {quoted}{pick} --out {shlex.quote(Path(store).stem + '-report')}"
        "   (every table and severity curve, 95% CIs, sample grids, provenance: report.html)")
    say(f"      from Python: shiftbench.results.store.Store({str(store)!r}).rows({run_id!r})   (the rows as dicts)")


def _engine_line(engine) -> str:
    """``engine: local (this process)``, or ray with the cluster it joined or the local one it started."""
    pixels = f"; pixels: {engine.pixels}" if engine.pixels else ""
    if not engine.ray:
        return f"engine: local (this process{pixels})"
    import os

    if engine.address == "auto":
        where = "the running cluster Ray found (address auto)"
    elif engine.address:
        where = f"the cluster at {engine.address}"
    else:
        where = f"a local Ray cluster on {plural(engine.workers or os.cpu_count() or 1, 'CPU')}"
    return f"engine: ray ({where}; units of {engine.shard_size or DEFAULT_SHARD} samples{pixels})"


def _print_headline(console, store: str, run_id: str | None) -> None:
    """The run's headline, computed from the store as the report computes it (report.run_headline)."""

    try:
        head = run_headline(store, run_id)
    except Exception as exc:  # noqa: BLE001 - the run is done and stored: a summary that fails must not hide that
        logging.getLogger("shiftbench").warning(f"the run's headline could not be computed ({type(exc).__name__}: "
                                                f"{one_line(str(exc))}); `shiftbench report` shows the results")
        return
    if head is not None:
        print_headline(console, head, f"headline of run {run_id}: {head.metric}")


def _dry_run(spec, store: str, run_id: str | None, new_run: bool) -> None:
    """Everything the run does before its first model call (engine.evaluate.prepare), then the plan."""

    address = spec.engine.address
    if spec.engine.ray:  # Ray importable and the cluster answering, as the run would check

        import_ray()
        if address not in (None, "", "auto"):
            check_reachable(address)
            token_auth(address)  # a cluster that would refuse the run's token (or its lack) refuses now
    plan = prepare(spec)
    where = "new store"
    path = Path(store)
    if path.is_file() and path.stat().st_size > 0:  # would the run resume, start, or stop on changed inputs?
        raw = plan.spec.raw  # with the metrics a spec without them takes from its task
        with Store(path, create=False) as db:
            rid, exists = db.resolve_run(raw, plan.identity(), run_id=run_id, new_run=new_run)
        where = f"{'resumes' if exists else 'starts'} run {rid}"
        if exists and new_run and run_id is None and rid == f"run-{spec_hash(raw)[:12]}":
            where += "; --new-run: the inputs equal that run's, so it is resumed rather than computed again"
    _print_plan(plan, f"{store} ({where})", defaults=not spec.metrics)
    _print_detectable(plan)


def _print_detectable(plan) -> None:
    """The smallest change the planned run can see (report.headline.planned_detectable), under its assumptions."""
    conditions = plan.spec.conditions()
    shifts = len({(c.shift, json.dumps(c.params, sort_keys=True)) for c in conditions if c.shift != "clean"})
    models = len({c.model for c in conditions}) or len(plan.models)
    line = planned_detectable(plan.samples, models, shifts, list(plan.spec.metrics))
    make_console().print(line + " (the report states it again from the run's own data)", soft_wrap=True, markup=False)


def _print_plan(plan, store: str, defaults: bool = False) -> None:
    from rich.table import Table

    spec = plan.spec
    conditions = spec.conditions()
    table = Table(title=f"planned conditions ({len(conditions)})", title_justify="left")
    for col in ("#", "model", "shift", "params", "severity"):
        table.add_column(col)
    for i, c in enumerate(conditions, 1):
        table.add_row(str(i), c.model, c.shift, json.dumps(c.params) if c.params else "", str(c.severity))
    console = make_console()

    def say(text: str) -> None:  # paths and names: never hard-wrapped, never read as rich markup
        console.print(text, soft_wrap=True, markup=False)

    dataset = plan.dataset
    kind = getattr(dataset, "description", None) or type(dataset).__name__
    say(f"dataset: {spec.dataset}: {kind}; {plan.samples} samples" + (f" (limit {spec.limit})" if spec.limit else ""))
    skipped = list(getattr(dataset, "skipped", None) or [])
    for item in skipped:
        say("  skipped: " + (": ".join(str(x) for x in item) if isinstance(item, (tuple, list)) else str(item)))
    for label, model in plan.models.items():
        say(f"model: {label} ({getattr(model, 'task', '?')}) loaded")
    say(f"metrics: {', '.join(spec.metrics)}{' (the task default: the spec lists none)' if defaults else ''}   "
        f"seed: {spec.seed}   store: {store}")
    if plan.conditions and spec.on_error == "fail":  # what prepare asked of the data (engine/evaluate.py)
        say(f"checked: every shift's params drawn on the first batch ({min(spec.batch_size, plan.samples)} "
            "samples) of every condition")
    if plan.conditions:  # engine/evaluate.py: _check_metrics, whatever on_error says
        say("checked: what every metric needs of a sample (Metric.needs) and of the model's outputs, on the first batch")
    engine = spec.engine
    if engine.ray:
        say(f"engine: ray ({engine.address or 'a local cluster'}; units of "
            f"{engine.shard_size or DEFAULT_SHARD} samples in whole batches of {spec.batch_size})")
    print_table(console, table)


def _write_json_atomic(path: Path, value: Any) -> None:
    if not path.parent.exists():
        raise ShiftbenchError(f"{path}: folder {path.parent} does not exist")
    write_atomic(path, json.dumps(value, indent=1))


# -- generate -----------------------------------------------------------------------------------
@cli.command("generate")
@click.option("--dataset", required=True, help="Registered dataset name or a dataset folder.")
@click.option("--shift", "shifts", required=True, multiple=True,
              help="Shift name, comma list, glob, or a group: all (19 corruptions), common (the 15 of ImageNet-C), cbar (the 10 of ImageNet-C-bar), "
                   "noise, blur, weather, digital, extra, text, background, attribute, imagenet_p (the 10 perturbation "
                   "sequences of ImageNet-P), imagenet_p_extra.")
@click.option("--severity", default=None,
              help="[default: 3; 1 when every shift is an ImageNet-P sequence, whose severity is the difficulty 1..3] "
                   "Severity, list (1,3,5), range (1-5) or grid (1-5:0.25: a step of 0.25, both ends included). "
                   "In-between severities (2.5) for shifts with a dial: the corruptions and ImageNet-C-bar; "
                   "each is written to <shift>/<severity>/ (gaussian_noise/2.5/).")
@click.option("--out", required=True, type=click.Path(), help="Output folder (new, or one generate wrote before).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--seed", type=SeedParam(), default=0, show_default=True, help="Random seed, 0 <= seed < 2**63.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N samples.")
@click.option("--format", "layout", type=click.Choice(["folder", "webdataset", "parquet", "png", "jpeg"]),
              default="folder", show_default=True,
              help="Output layout: folder (the mirrored tree), webdataset (tar shards) or parquet, each with the "
                   "manifest; png / jpeg (kept for older commands) mean folder with that --image-format.")
@click.option("--image-format", "fmt", type=click.Choice(["png", "jpeg", "webp"]), default=None,
              help="Image encoding [default: png; jpeg with --protocol imagenet-c]; JPEG and WebP are lossy, "
                   "recorded in the manifest.")
@click.option("--shard-samples", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Samples per webdataset / parquet shard.")
@click.option("--quality", type=click.IntRange(1, 100), default=None,
              help="Quality of a JPEG or WebP encoding [default: 95; 85 with --protocol imagenet-c].")
@click.option("--jpeg-quality", type=click.IntRange(1, 100), default=None, hidden=True,
              help="The older name of --quality.")
@click.option("--protocol", type=click.Choice(["imagenet-c", "imagenet-p"]), default=None,
              help="A published procedure: imagenet-c resizes the shorter side to 256 (bilinear), centre-crops 224, "
                   "shifts, and saves JPEG quality 85 (optimize) to <shift>/<severity>/<class>/<file name>; "
                   "imagenet-p resizes to 256, makes each p_* sequence with its frames centre-cropped to 224 (after "
                   "the warp for geometric ones) and saves them as PNG frames to "
                   "<shift>/<difficulty>/<class>/<file stem>/<frame>.png.")
@click.option("--resize", type=click.IntRange(min=1), default=None,
              help="Resize the shorter side to this many pixels before the shift (Pillow).")
@click.option("--crop", default=None, help="Centre crop after the resize: SIZE or HEIGHT,WIDTH.")
@click.option("--interpolation", type=click.Choice(["bilinear", "bicubic", "nearest", "area", "lanczos"]),
              default=None, help="The resize's filter [default: bilinear]; masks always take nearest.")
@click.option("--param", "params", multiple=True, help="Shift parameter KEY=VALUE (YAML value), repeatable.")
@click.option("--on-error", type=click.Choice(["fail", "skip"]), default="fail", show_default=True,
              help="Unreadable images or a sample the shift fails on: stop, naming it, or skip it (logged, "
                   "recorded in the manifest).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: this machine (--workers processes); ray: Ray tasks per shard, model shifts on actors "
                   "(needs Ray, the ray extra: docs/scale.md).")
@click.option("--address", default=None,
              help="Ray cluster to join (HOST:PORT of its head); default: start a local one on --workers CPUs.")
@click.option("--shard-size", type=click.IntRange(min=1), default=16, show_default=True,
              help="Sample indices per work unit (the outputs do not depend on it).")
def generate_cmd(dataset: str, shifts: tuple[str, ...], severity: str | None, out: str, **options: Any) -> None:
    """Write a shifted copy of a dataset with a manifest.jsonl of every output's params."""

    names = resolve_shifts(shifts)
    if severity is None:  # ImageNet-P's sequences default to the published difficulty 1, everything else to 3
        severity = "1" if all(shift_info(n).role == "perturbation" for n in names) else "3"
    shift_params = _parse_params(options.pop("params"))
    severities = parse_severities(severity, "--severity")
    options.update(image_format=options.pop("fmt"), shift_params=shift_params, crop=_parse_crop(options["crop"]),
                   progress=True,
                   announce=lambda line: make_console().print(line, soft_wrap=True, markup=False))
    summary = generate(dataset, names, severities, out, GenerateOptions.parse(**options))
    unreadable = (f", {summary['unreadable']} unreadable or failed sample(s) skipped (see the manifest)"
                  if summary["unreadable"] else "")
    make_console().print(f"wrote {summary['written']} outputs ({summary['skipped']} already done{unreadable}) to {out}", soft_wrap=True, markup=False)


def _parse_crop(text: str | None) -> int | list[int] | None:
    """``--crop 224`` or ``--crop 224,192`` (height, width)."""
    if text is None:
        return None
    parts = [p.strip() for p in str(text).replace("x", ",").split(",")]
    if len(parts) in (1, 2) and all(p.isdigit() and int(p) > 0 for p in parts):
        return int(parts[0]) if len(parts) == 1 else [int(p) for p in parts]
    raise ShiftbenchError(f"--crop {text!r}: expected SIZE or HEIGHT,WIDTH (positive integers)")


def _parse_params(items: tuple[str, ...]) -> dict[str, Any]:
    import yaml

    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ShiftbenchError(f"--param {item!r}: expected KEY=VALUE")
        params[key] = yaml.safe_load(value)
    return params


# -- curate -------------------------------------------------------------------------------------
@cli.command("curate")
@click.option("--dataset", required=True, help="Registered dataset name or a dataset folder.")
@click.option("--models", required=True, help="Comma-separated classifiers that must all be right.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Id list to write.")
@click.option("--min-mask-fraction", type=click.FloatRange(0, 1), default=None,
              help="Also require an object mask covering at least this fraction of the image.")
@click.option("--limit", type=click.IntRange(min=1), default=None)
def curate_cmd(dataset: str, models: str, out: str, min_mask_fraction: float | None, limit: int | None) -> None:
    """Keep the samples every model of an ensemble classifies correctly on clean data (ObjectCompose)."""

    names = [m.strip() for m in models.split(",") if m.strip()]
    summary = curate(dataset, names, out, min_mask_fraction=min_mask_fraction, limit=limit)
    make_console().print(f"kept {summary['kept']} of {summary['total']} samples "
                     f"(dropped: {summary['dropped']}) -> {out}")


# -- report / demo ------------------------------------------------------------------------------
@cli.command("report")
@click.option("--store", required=True, type=click.Path(), help="Results database.")
@click.option("--out", required=True, type=click.Path(),
              help="Output folder; only the files of an earlier report there are replaced (and named).")
@click.option("--run-id", "run_ids", multiple=True, help="Which run (repeatable; default: the latest).")
@click.option("--all-runs", is_flag=True, help="Every run of the store, one section each.")
@click.option("--correction", type=click.Choice(["holm", "bh", "none"]), default="holm", show_default=True,
              help="Multiplicity correction of each headline's paired tests (one family per run): holm (family-wise "
                   "error), bh (Benjamini-Hochberg, false discovery rate) or none; ≈ follows the adjusted p.")
def report_cmd(store: str, out: str, run_ids: tuple[str, ...], all_runs: bool, correction: str) -> None:
    """Build tables and an HTML report from a results store (never re-runs models)."""

    if all_runs:
        with Store(store, create=False) as db:
            run_ids = tuple(r["run_id"] for r in db.runs())
    with Steps("report", "table rows") as steps:
        path = build_report(store, out, run_id=list(run_ids) if run_ids else None, progress=steps,
                            correction=correction)
    make_console().print(f"report: {path}", soft_wrap=True, markup=False)


@cli.command("export")
@click.option("--store", required=True, type=click.Path(), help="Results database.")
@click.option("--format", "fmt", required=True, metavar="FORMAT",
              help="robustbench (RobustBench's model_info/<dataset>/corruptions layout), jsonl (conditions.jsonl, and "
                   "one line per sample and metric in samples.jsonl), parquet (samples.parquet and predictions.parquet; "
                   "needs the stream extra) or results (one JSON per run: rows, 95% CIs, failure points, provenance).")
@click.option("--out", required=True, type=click.Path(),
              help="Output folder; only the files of an earlier export there are replaced.")
@click.option("--run-id", "run_ids", multiple=True, help="Which run (repeatable; default: the latest).")
@click.option("--all", "all_runs", is_flag=True, help="Every run of the store.")
def export_cmd(store: str, fmt: str, out: str, run_ids: tuple[str, ...], all_runs: bool) -> None:
    """Export runs of a results store for other tools (never re-runs models; docs/exports.md)."""

    with Steps("export", "steps") as steps:
        done = export_store(store, out, fmt, run_id=list(run_ids) if run_ids else None, all_runs=all_runs,
                            progress=steps)
    for note in done.notes:  # what the store lacked, one line each
        click.echo(f"note: {one_line(note)}", err=True)
    make_console().print(f"export {done.format}: {plural(len(done.files), 'file')} of {plural(len(done.runs), 'run')} "
                     f"in {out}", soft_wrap=True, markup=False)


@cli.command("demo")
@click.option("--out", default="shiftbench-demo", show_default=True, type=click.Path(file_okay=False))
@click.option("--quick", is_flag=True, help="A smaller run (about a minute on 2 CPU cores).")
def demo_cmd(out: str, quick: bool) -> None:
    """Run the bundled benchmark on built-in data with the bundled models and write a report."""

    run_demo(out, quick=quick)


# -- leaderboard --------------------------------------------------------------------------------
@cli.command("leaderboard")
@click.argument("stores", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Folder for leaderboard.md and leaderboard.html (sortable columns); without it, print only.")
@click.option("--by", default=None,
              help="Column to rank by [default: clean, the headline metric on clean data]: corruptions, mce, "
                   "rel-mce, bg-gap, a background family (mixed_same, color, ...), attribute-color, gamma-image, "
                   "gamma-text, breaks-at, ...")
def leaderboard_cmd(stores: tuple[str, ...], out: str | None, by: str | None) -> None:
    """One row per (model, weights) across STORES and their runs, ranked, ties within noise marked (≈)."""

    if out is not None:
        out_folder(out, "leaderboard")  # an empty --out refused before anything is printed
    with Steps("leaderboard", "steps") as steps:
        board = leaderboard(list(stores), by=by, progress=steps)
    click.echo(to_markdown(board), nl=False)
    if out is not None:
        md, html = write_leaderboard(board, out)
        make_console().print(f"leaderboard: {md} and {html}", soft_wrap=True, markup=False)


# -- train-retriever (issue 9: composed image retrieval) ----------------------------------------------
@cli.command("train-retriever")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Checkpoint path (.safetensors; config beside it as .json). Default: the user cache.")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Training epochs (default 60).")
@click.option("--seed", type=SeedParam(), default=0, show_default=True, help="Random seed, 0 <= seed < 2**63.")
def train_retriever_cmd(out: str | None, epochs: int | None, seed: int) -> None:
    """Train the combiner and text_only's projection on objects-cir train (CPU, minutes)."""

    path = Path(out) if out else cache_dir() / f"{CHECKPOINT_NAME}.safetensors"
    command = "shiftbench train-retriever" + (f" --epochs {epochs}" if epochs else "") + f" --seed {seed}"
    overrides: dict[str, Any] = {"seed": seed}
    if epochs:
        overrides["epochs"] = epochs
    train_retrievers(path, log=lambda message: click.echo(message, err=True), command=command, **overrides)
    click.echo(str(path))
# -- end of train-retriever ---------------------------------------------------------------------------


def one_line(text: str) -> str:
    """A message as one line: a name from the data that holds a line break is shown escaped, never folded."""
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\x85", "\\x85").replace("\u2028", "\\u2028")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning user mistakes into one-line errors (exit status 2)."""
    try:
        cli.main(args=argv, prog_name="shiftbench", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except ShiftbenchError as exc:  # the settings it names said as this command's flags (errors.Option)
        click.echo(f"error: {one_line(exc.render(cli=True))}", err=True)
        return 2
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
