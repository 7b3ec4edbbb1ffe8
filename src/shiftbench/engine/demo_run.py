"""``shiftbench demo``: the bundled specs on built-in data with the bundled models, then the report.

Part 1 (configs/demo.yaml): the three EfficientNet-Lite classifiers on `objects` under the 15
ImageNet-C corruptions at every severity and the ObjectCompose background families. Part 2
(configs/demo_cir.yaml): the four composed retrievers on `objects-cir` under image and text
corruptions. Both write to ``OUT/results.db``; the report of both runs goes to ``OUT/report/``.
``--quick`` runs the smaller cuts (demo_quick.yaml, demo_cir_quick.yaml). Offline, on the CPU;
a rerun resumes from the store.
"""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..console import print_table
from ..errors import ShiftbenchError


def demo_spec(name: str) -> dict[str, Any]:
    """A bundled spec by file stem (``demo``, ``demo_quick``, ``demo_cir``, ``demo_cir_quick``)."""
    text = resources.files("shiftbench").joinpath(f"configs/{name}.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def run_demo(out: str | Path, quick: bool = False) -> Path:
    from ..console import make_console, plural
    from ..report import build_report
    from .evaluate import evaluate

    console = make_console()
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ShiftbenchError(f"{out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if quick else ""
    store = out / f"results{suffix}.db"
    start = time.perf_counter()
    run_ids, timings = [], {}
    summaries = []
    for part in (f"demo{suffix}", f"demo_cir{suffix}"):
        spec = demo_spec(part)
        console.print(f"[bold]{spec['name']}[/bold]: {plural(len(spec['models']), 'model')} on '{spec['dataset']}', "
                      f"{plural(len(spec['shifts']), 'shift entry', 'shift entries')} -> {store}", soft_wrap=True)
        t = time.perf_counter()
        rows = evaluate(spec, store=store, progress=True)
        timings[spec["name"]] = time.perf_counter() - t
        run_ids.append(rows[0]["run_id"])
        summaries.append(rows)
    report = build_report(store, out / f"report{suffix}", run_id=run_ids)
    total = time.perf_counter() - start
    _print_classification(console, summaries[0], demo_spec(f"demo{suffix}"))
    _print_retrieval(console, summaries[1])
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
    console.print(f"done in {total:.0f} s ({parts}); report: {report}", soft_wrap=True, markup=False)
    return report


def _print_classification(console, rows: list[dict[str, Any]], spec: dict[str, Any] | None = None) -> None:
    """Per model: clean, the corruptions' mean, the natural background families' mean, and the two
    controls and the attack in columns of their own (never averaged into the natural families)."""
    from rich.table import Table

    from ..registry import SHIFTS
    from ..report.headline import NATURAL_FAMILIES
    from ..report.objectcompose import family_of
    from ..report.tables import condition_label

    table = Table(title="top-1 accuracy (%) on objects", title_justify="left")
    table.add_column("model", no_wrap=True)
    columns = ("clean", "corruptions (mean)", "natural backgrounds (mean)", "object only (control)",
               "background only (control)", "adversarial (attack)")
    for col in columns:
        table.add_column(col, justify="right")
    table.add_column("worst corruption", overflow="fold")
    top1 = [r for r in rows if r["metric"] == "top1" and r["value"] is not None]
    groups = {e.name: e.meta.get("group") for e in SHIFTS.entries()}
    source = _attack_source(spec, rows)
    n = max((r["n"] for r in top1 if r["shift"] == "clean"), default=0)
    for model in dict.fromkeys(r["model"] for r in top1):
        mine = [r for r in top1 if r["model"] == model]
        clean = next((r["value"] for r in mine if r["shift"] == "clean"), None)
        corr = [r for r in mine if groups.get(r["shift"]) in ("noise", "blur", "weather", "digital")]
        fam = {r["shift"]: family_of(r["shift"], r["params"]) for r in mine}
        natural = [r["value"] for r in mine if fam[r["shift"]] in NATURAL_FAMILIES]
        attack = [r["value"] for r in mine if fam[r["shift"]] == "adversarial"]
        worst = min(corr, key=lambda r: r["value"], default=None)
        cells = [_pct(clean), _mean_pct([r["value"] for r in corr]), _mean_pct(natural),
                 _mean_pct([r["value"] for r in mine if fam[r["shift"]] == "object_only"]),
                 _mean_pct([r["value"] for r in mine if fam[r["shift"]] == "background_only"]),
                 _mean_pct(attack) + ("" if not attack else " (attacked)" if model == source else " (transfer)")]
        table.add_row(model, *cells,
                      f"{condition_label(worst['shift'], worst['params'])} s{worst['severity']} ({_pct(worst['value'])})"
                      if worst else "–")
    print_table(console, table)
    notes = [f"{n} images per cell: one image is {100 / n:.1f} points." if n else ""]
    if any(family_of(r["shift"], r["params"]) == "adversarial" for r in top1):
        early = any((r["params"] or {}).get("early_stop") for r in top1 if r["shift"].startswith("adversarial"))
        notes.append(f"The adversarial background is optimised against {source}"
                     + (" and stops on each image as soon as it is fooled (early_stop: true), so it is weaker "
                        "on the other models than the full 30 steps." if early else "."))
    console.print(" ".join(x for x in notes if x), soft_wrap=True, markup=False)



def _attack_source(spec: dict[str, Any] | None, rows: list[dict[str, Any]]) -> str:
    """The classifier the adversarial background is optimised against (its ``model`` parameter, by
    default efficientnet_lite0)."""
    for entry in (spec or {}).get("shifts", []):
        if isinstance(entry, dict) and str(entry.get("name", "")).startswith("adversarial"):
            model = (entry.get("params") or {}).get("model")
            if model:
                return str(model)
    return "efficientnet_lite0"


def _mean_pct(values: list[float]) -> str:
    return _pct(sum(values) / len(values)) if values else "–"


def _print_retrieval(console, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    table = Table(title="composed retrieval on objects-cir test: R@10 (%) and mean gamma@10", title_justify="left")
    for col in ("retriever", "clean R@10", "mean gamma@10 (image)", "mean gamma@10 (text)"):
        table.add_column(col)
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        clean = next((r["value"] for r in mine if r["shift"] == "clean" and r["metric"] == "R@10"), None)
        g_img = [r["value"] for r in mine if r["metric"] == "gamma@10" and not r["shift"].startswith("text_")]
        g_txt = [r["value"] for r in mine if r["metric"] == "gamma@10" and r["shift"].startswith("text_")]
        table.add_row(model, _pct(clean), _num(g_img), _num(g_txt))
    print_table(console, table)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def _num(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    return f"{sum(values) / len(values):.3f}" if values else "–"
