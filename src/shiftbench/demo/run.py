"""``shiftbench demo``: the bundled specs on built-in data with the bundled models, then the report.

Part 1 (configs/demo.yaml): the three EfficientNet-Lite classifiers on `objects` (natural context) under the
15 ImageNet-C corruptions at every severity. Part 2 (configs/demo_objectcompose.yaml): the ObjectCompose
protocol, curated to the images every classifier gets right on clean, under Mixed-Same / Mixed-Rand scenes,
colour and texture backgrounds, the two controls and the adversarial background. Part 3
(configs/demo_cir.yaml): the four composed retrievers on `objects-cir` under image and text corruptions.
All write to ``OUT/results.db``; the report of the three runs goes to ``OUT/report/``. ``--quick`` runs the
smaller cuts (the ``_quick`` files). Offline, on the CPU; a rerun resumes from the store.
"""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..console import make_console, plural, print_table
from ..engine.evaluate import evaluate
from ..engine.spec import load_spec
from ..errors import ShiftbenchError
from ..report import build_report
from ..report.objectcompose import CUSTOM_FAMILIES, NATURAL_FAMILIES, SYNTHETIC_FAMILIES, attack_source, family_of
from ..report.tables import condition_label
from ..results.records import Row
from ..shifts.groups import group_members


def demo_spec(name: str) -> dict[str, Any]:
    """A bundled spec by file stem (``demo``, ``demo_quick``, ``demo_cir``, ``demo_cir_quick``)."""
    text = resources.files("shiftbench").joinpath(f"configs/{name}.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def run_demo(out: str | Path, quick: bool = False) -> Path:
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
    for part in (f"demo{suffix}", f"demo_objectcompose{suffix}", f"demo_cir{suffix}"):
        spec = load_spec(demo_spec(part))  # parsed once; the run takes it as is
        console.print(f"[bold]{spec.name}[/bold]: {plural(len(spec.models), 'model')} on '{spec.dataset}', "
                      f"{plural(len(spec.shifts), 'shift entry', 'shift entries')} -> {store}", soft_wrap=True)
        t = time.perf_counter()
        rows = evaluate(spec, store=store, progress=True)
        timings[spec.name] = time.perf_counter() - t
        summaries.append([Row(**r) for r in rows])  # evaluate's rows (dicts, its public return) as records
        run_ids.append(summaries[-1][0].run_id)
    report = build_report(store, out / f"report{suffix}", run_id=run_ids)
    total = time.perf_counter() - start
    _print_classification(console, summaries[0], "corruptions")
    _print_classification(console, summaries[1], "ObjectCompose backgrounds, curated")
    _print_retrieval(console, summaries[2])
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
    console.print(f"done in {total:.0f} s ({parts}); report: {report}", soft_wrap=True, markup=False)
    return report


def _print_classification(console, rows: list[Row], what: str = "") -> None:
    """Per model: clean, the mean of the k corruptions, the natural scenes' mean (when there are others than
    Mixed-Same and Mixed-Rand, which have their own columns), Mixed-Same, Mixed-Rand and their BG-Gap, the
    synthetic (colour, texture) backgrounds' mean, custom prompts, and the two controls and the attack in
    columns of their own (families grouped by what they are, report.objectcompose's roles: never colour or
    texture as natural, never a control or the attack in a background mean). Columns a run has no rows
    for are left out."""
    from rich.table import Table

    top1 = [r for r in rows if r.metric == "top1" and r.value is not None]
    common = set(group_members("common") or ())  # ImageNet-C's 15: its four families, no extras
    source = _attack_source(top1)
    n = max((r.n for r in top1 if r.shift == "clean"), default=0)
    fam = {(r.shift, r.params_key): family_of(r.shift, r.params) for r in top1}

    def family(r: Row) -> str | None:
        return fam[(r.shift, r.params_key)]

    def values(mine: list[Row], names: tuple[str, ...]) -> list[float]:
        return [r.value for r in mine if family(r) in names]

    is_corruption = lambda r: r.shift in common  # noqa: E731
    present = {family(r) for r in top1}
    gap = {"mixed_same", "mixed_rand"} <= present
    columns: list[tuple[str, Any]] = [("clean", lambda mine: _pct(next((r.value for r in mine
                                                                        if r.shift == "clean"), None)))]
    if any(is_corruption(r) for r in top1):
        k = len({r.shift for r in top1 if is_corruption(r)})
        columns.append((f"mean of {k} corruption{'s' if k != 1 else ''}",
                        lambda mine: _mean_pct([r.value for r in mine if is_corruption(r)])))
    if present & set(NATURAL_FAMILIES) - ({"mixed_same", "mixed_rand"} if gap else set()):
        columns.append(("natural scenes (mean)", lambda mine: _mean_pct(values(mine, NATURAL_FAMILIES))))
    if gap:
        columns += [("Mixed-Same", lambda mine: _mean_pct(values(mine, ("mixed_same",)))),
                    ("Mixed-Rand", lambda mine: _mean_pct(values(mine, ("mixed_rand",)))),
                    ("BG-Gap (points)", lambda mine: _points(values(mine, ("mixed_same",)), values(mine, ("mixed_rand",))))]
    if present & set(SYNTHETIC_FAMILIES):
        columns.append(("colour, texture backgrounds (mean)", lambda mine: _mean_pct(values(mine, SYNTHETIC_FAMILIES))))
    if present & set(CUSTOM_FAMILIES):
        columns.append(("custom prompts (mean)", lambda mine: _mean_pct(values(mine, CUSTOM_FAMILIES))))
    if "object_only" in present:
        columns.append(("object only (control)", lambda mine: _mean_pct(values(mine, ("object_only",)))))
    if "background_only" in present:
        columns.append(("background only (control)", lambda mine: _mean_pct(values(mine, ("background_only",)))))
    if "adversarial" in present:
        columns.append(("adversarial (attack)", None))
    title = "top-1 accuracy (%) on objects" + (f": {what}" if what else "")
    table = Table(title=title, title_justify="left")
    table.add_column("model", no_wrap=True)
    for head, _ in columns:
        table.add_column(head, justify="right")
    corrupted = any(is_corruption(r) for r in top1)
    if corrupted:
        table.add_column("worst corruption", overflow="fold")
    for model in dict.fromkeys(r.model for r in top1):
        mine = [r for r in top1 if r.model == model]
        cells = []
        for head, fn in columns:
            if fn is None:  # the attack: which model it was optimised against
                attack = values(mine, ("adversarial",))
                cells.append(_mean_pct(attack) + (" (attacked)" if model == source else " (transfer)"))
            else:
                cells.append(fn(mine))
        if corrupted:
            worst = min((r for r in mine if is_corruption(r)), key=lambda r: r.value, default=None)
            cells.append(f"{condition_label(worst.shift, worst.params)} s{worst.severity} "
                         f"({_pct(worst.value)})" if worst else "–")
        table.add_row(model, *cells)
    print_table(console, table)
    notes = [f"{n} images per cell: one image is {100 / n:.1f} points." if n else ""]
    if any(family_of(r.shift, r.params) == "adversarial" for r in top1):
        early = any((r.params or {}).get("early_stop") for r in top1 if family(r) == "adversarial")
        notes.append(f"The adversarial background is optimised against {source or 'a model given as an object'}"
                     + (" and stops on each image as soon as it is fooled (early_stop: true), so it is weaker "
                        "on the other models than the full 30 steps." if early else "."))
    console.print(" ".join(x for x in notes if x), soft_wrap=True, markup=False)



def _attack_source(rows: list[Row]) -> str | None:
    """The classifier the adversarial background is optimised against, from the rows' own params
    (``report.objectcompose.attack_source``: the shift's source parameter, or its default)."""
    for r in rows:
        source = attack_source(r.shift, r.params or {})
        if source is not None:
            return source
    return None


def _points(same: list[float], rand: list[float]) -> str:
    """Mixed-Same minus Mixed-Rand in points of top-1, signed."""
    if not same or not rand:
        return "–"
    return f"{100 * (sum(same) / len(same) - sum(rand) / len(rand)):+.1f}"


def _mean_pct(values: list[float]) -> str:
    return _pct(sum(values) / len(values)) if values else "–"


def _print_retrieval(console, rows: list[Row]) -> None:
    from rich.table import Table

    text = set(group_members("text") or ())  # the text shifts; the others change the image
    table = Table(title="composed retrieval on objects-cir test: R@10 (%) and mean gamma@10", title_justify="left")
    for col in ("retriever", "clean R@10", "mean gamma@10 (image)", "mean gamma@10 (text)"):
        table.add_column(col)
    for model in dict.fromkeys(r.model for r in rows):
        mine = [r for r in rows if r.model == model]
        clean = next((r.value for r in mine if r.shift == "clean" and r.metric == "R@10"), None)
        g_img = [r.value for r in mine if r.metric == "gamma@10" and r.shift not in text]
        g_txt = [r.value for r in mine if r.metric == "gamma@10" and r.shift in text]
        table.add_row(model, _pct(clean), _num(g_img), _num(g_txt))
    print_table(console, table)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def _num(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    return f"{sum(values) / len(values):.3f}" if values else "–"
