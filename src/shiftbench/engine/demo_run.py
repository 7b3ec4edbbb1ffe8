"""``shiftbench demo``: the bundled spec (configs/demo.yaml) on built-in data with the bundled models.

Runs offline on the CPU, writes ``OUT/results.db`` and the report (``OUT/report/report.html``), then
prints a short summary: clean accuracy per model, the mean over shifted conditions, and the worst shift.
"""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..errors import ShiftbenchError


def demo_spec(quick: bool = False) -> dict[str, Any]:
    """The bundled demo spec; ``quick`` keeps fewer samples, one model and severities 3 and 5."""
    text = resources.files("shiftbench").joinpath("configs/demo.yaml").read_text(encoding="utf-8")
    spec = yaml.safe_load(text)
    if quick:
        quick_opts = spec.pop("quick", {})
        for key, value in quick_opts.items():
            spec[key] = value
    else:
        spec.pop("quick", None)
    return spec


def run_demo(out: str | Path, quick: bool = False) -> Path:
    from rich.console import Console
    from rich.table import Table

    from ..report import build_report
    from .evaluate import evaluate

    console = Console(highlight=False)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ShiftbenchError(f"{out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    spec = demo_spec(quick)
    store = out / ("results-quick.db" if quick else "results.db")
    console.print(f"shiftbench demo{' --quick' if quick else ''}: {len(spec['models'])} models on "
                  f"'{spec['dataset']}' ({spec.get('limit', 'all')} samples), results in {store}")
    start = time.perf_counter()
    rows = evaluate(spec, store=store, progress=True)
    seconds = time.perf_counter() - start
    report = build_report(store, out / ("report-quick" if quick else "report"))

    table = Table(title=f"top-1 accuracy (%), {seconds:.0f} s", title_justify="left")
    for col in ("model", "clean", "mean shifted", "worst shift"):
        table.add_column(col)
    top1 = [r for r in rows if r["metric"] == "top1" and r["value"] is not None]
    for model in dict.fromkeys(r["model"] for r in top1):
        mine = [r for r in top1 if r["model"] == model]
        clean = next((r["value"] for r in mine if r["shift"] == "clean"), None)
        shifted = [r for r in mine if r["shift"] != "clean"]
        by_shift: dict[str, list[float]] = {}
        for r in shifted:
            by_shift.setdefault(_label(r), []).append(r["value"])
        worst = min(by_shift.items(), key=lambda kv: sum(kv[1]) / len(kv[1])) if by_shift else None
        table.add_row(
            model,
            f"{100 * clean:.1f}" if clean is not None else "–",
            f"{100 * sum(r['value'] for r in shifted) / len(shifted):.1f}" if shifted else "–",
            f"{worst[0]} ({100 * sum(worst[1]) / len(worst[1]):.1f})" if worst else "–",
        )
    console.print(table)
    console.print(f"report: {report}")
    return report


def _label(row: dict[str, Any]) -> str:
    from ..report.tables import condition_label

    return condition_label(row["shift"], row["params"])
