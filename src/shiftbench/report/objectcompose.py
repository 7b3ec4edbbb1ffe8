"""ObjectCompose summary from result rows: each prompt family's mean and worst condition, their change
against clean, the controls and the attack in their own rows, and whether the paper's ordering
(class label >= caption > colour ~ texture >> adversarial) holds.

Families: ``background_inpaint`` / ``adversarial_diffusion`` are placed by their prompt (``class_label``,
``caption``, ``colorN``, ``textureN``); the weight-free backend maps ``background_color`` to colour,
``background_texture`` to texture, ``background_scene`` to ``scene`` (the compose stand-in for the natural
class-label and caption backgrounds) and ``adversarial_texture`` / ``adversarial_diffusion`` to adversarial.
Each family has a role: ``background`` (natural prompt families), ``control`` (``object_only``,
``background_only``: masking conditions, 0 % by construction for ``background_only``) or ``attack``
(``adversarial``, white-box). Controls and attacks are never averaged into a background family.

One sign convention: every ``change`` is shifted minus clean (a background that lowers top-1 gives a
negative change). Two aggregates per family: ``mean`` (over the family's conditions, what the report's
headline shows) and ``worst`` (the paper's Table 1: the worst prompt of the mean over classifiers).
The ordering checks use the worst values: ``>=`` and ``>`` literally, ``~`` as within ``SIMILAR``
(5 points), ``>>`` as at least ``FAR`` (20 points) lower.

>>> rows = [dict(model="m", shift="clean", params={}, severity=0, metric="top1", value=0.9, n=10),
...         dict(model="m", shift="background_color", params={"color": "red"}, severity=5, metric="top1", value=0.7, n=10),
...         dict(model="m", shift="background_color", params={"color": "blue"}, severity=5, metric="top1", value=0.6, n=10)]
>>> s = summarise(rows)
>>> c = s["families"]["color"]
>>> c["worst"], round(c["change"], 3), round(c["mean"], 3), round(c["mean_change"], 3), c["role"]
('background_color (color=blue) s5', -0.3, 0.65, -0.25, 'background')
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from .blocks import blocks_to_markdown, cell

__all__ = ["family_of", "role_of", "summarise", "summary_blocks", "blocks_from_summary", "to_markdown",
           "write_summary", "FAMILY_ORDER", "ROLES", "SIMILAR", "FAR", "TITLE"]

FAMILY_ORDER = ("class_label", "caption", "scene", "color", "texture", "custom", "adversarial", "object_only",
                "background_only")
ROLES = {"adversarial": "attack", "object_only": "control", "background_only": "control"}  # the rest: background
SIMILAR = 0.05
FAR = 0.20
TITLE = "ObjectCompose summary"


def family_of(shift: str, params: dict[str, Any] | None) -> str | None:
    """The ObjectCompose family of a condition, or None for conditions outside the protocol."""
    params = params or {}
    if shift in ("adversarial_texture", "adversarial_diffusion"):
        return "adversarial"
    if shift == "background_inpaint":
        prompt = str(params.get("prompt", "class_label"))
        family = prompt.rstrip("0123456789")
        return family if family in ("class_label", "caption", "color", "texture") else "custom"
    return {"background_color": "color", "background_texture": "texture", "background_scene": "scene",
            "object_only": "object_only", "background_only": "background_only"}.get(shift)


def role_of(family: str) -> str:
    """``"background"`` for a natural prompt family, ``"control"`` for the masking conditions, ``"attack"``
    for adversarial backgrounds."""
    return ROLES.get(family, "background")


def _label(shift: str, params: dict[str, Any], severity: int) -> str:
    inner = ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in ("mask", "dilation"))
    return f"{shift} ({inner}) s{severity}" if inner else f"{shift} s{severity}"


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def summarise(rows: Iterable[dict[str, Any]], metric: str = "top1") -> dict[str, Any]:
    """Per family: the mean over its conditions and the worst condition (of the model mean), each with its
    change against clean (shifted - clean), and the same per model.

    Returns ``{"metric", "clean", "clean_per_model", "n_per_model", "families": {family: {"role",
    "conditions", "mean", "mean_change", "worst", "value", "change", "per_model": {model: {"mean",
    "mean_change", "worst", "value", "change", "n"}}}}, "ordering": {check: True | False | None},
    "holds": bool | None}``; ``value`` / ``change`` are the worst condition's (the paper's Table 1).
    """
    values: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)  # (condition, family) -> model -> value
    counts: dict[tuple[str, str], int] = {}  # (condition, model) -> n
    clean: dict[str, float] = {}
    clean_n: dict[str, int] = {}
    for r in rows:
        if r.get("metric") != metric or r.get("value") is None:
            continue
        params = r.get("params") or {}
        if isinstance(params, str):
            params = json.loads(params)
        if r["shift"] == "clean":
            clean[r["model"]] = float(r["value"])
            clean_n[r["model"]] = int(r.get("n") or 0)
            continue
        family = family_of(r["shift"], params)
        if family is not None:
            label = _label(r["shift"], params, int(r.get("severity") or 0))
            values[(label, family)][r["model"]] = float(r["value"])
            counts[(label, r["model"])] = int(r.get("n") or 0)
    models = sorted(clean)
    clean_mean = sum(clean.values()) / len(clean) if clean else None
    by_family: dict[str, list[tuple[str, dict[str, float]]]] = defaultdict(list)
    for (label, family), per_model in values.items():
        by_family[family].append((label, per_model))
    families: dict[str, Any] = {}
    for family in [f for f in FAMILY_ORDER if f in by_family] + sorted(set(by_family) - set(FAMILY_ORDER)):
        conditions = by_family[family]
        entry: dict[str, Any] = {"role": role_of(family), "conditions": [label for label, _ in conditions],
                                 "mean": None, "mean_change": None, "worst": None, "value": None, "change": None,
                                 "per_model": {}}
        means = []
        for label, per_model in conditions:
            # the model mean of a condition over the models that have a clean value too, so its change is fair
            shared = [m for m in models if m in per_model] or sorted(per_model)
            mean = sum(per_model[m] for m in shared) / len(shared)
            means.append(mean)
            if entry["value"] is None or mean < entry["value"]:  # ties keep the first (spec order)
                entry.update(worst=label, value=mean, change=_sub(mean, clean_mean))
        entry["mean"] = sum(means) / len(means)
        entry["mean_change"] = _sub(entry["mean"], clean_mean)
        for m in sorted({m for _, pm in conditions for m in pm}):
            own = [(label, pm[m]) for label, pm in conditions if m in pm]
            worst_label, worst = min(own, key=lambda lv: lv[1])
            mean = sum(v for _, v in own) / len(own)
            entry["per_model"][m] = {"mean": mean, "mean_change": _sub(mean, clean.get(m)),
                                     "worst": worst_label, "value": worst, "change": _sub(worst, clean.get(m)),
                                     "n": counts.get((own[0][0], m))}
        families[family] = entry
    ordering = _ordering({f: e["value"] for f, e in families.items()})
    decided = [v for v in ordering.values() if v is not None]
    return {"metric": metric, "clean": clean_mean, "clean_per_model": clean, "n_per_model": clean_n,
            "families": families, "ordering": ordering, "holds": all(decided) if decided else None}


def _ordering(v: dict[str, float]) -> dict[str, bool | None]:
    """The paper's ordering, piece by piece, on the worst values; None where a family is missing. Controls
    never take part; the adversarial family only where the paper compares it."""
    natural = [f for f in ("class_label", "caption", "scene") if f in v]
    weakest_natural = min((v[f] for f in natural), default=None)

    def need(*fams):
        return all(f in v for f in fams)

    checks: dict[str, bool | None] = {
        "class_label >= caption": v["class_label"] >= v["caption"] if need("class_label", "caption") else None,
        "natural > color": weakest_natural > v["color"] if natural and need("color") else None,
        "natural > texture": weakest_natural > v["texture"] if natural and need("texture") else None,
        "color ~ texture": abs(v["color"] - v["texture"]) <= SIMILAR if need("color", "texture") else None,
        "color, texture >> adversarial": (min(v["color"], v["texture"]) - v["adversarial"] >= FAR
                                          if need("color", "texture", "adversarial") else None),
    }
    return checks


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _signed(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}"


def _change_cell(x: float | None, n_text: str) -> str | dict[str, Any]:
    if x is None:
        return "–"
    return cell(_signed(x), f"shifted - clean; {n_text}", "down" if x < 0 else ("up" if x > 0 else None))


def blocks_from_summary(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary as report blocks (contract: heading / text / list / table; plain strings, no Markdown)."""
    metric = summary["metric"]
    n_models = len(summary["clean_per_model"])
    ns = sorted(set(summary.get("n_per_model", {}).values()))
    n_text = ("n = " + "/".join(str(n) for n in ns) + " images per model and condition") if ns else "n not recorded"
    blocks: list[dict[str, Any]] = [
        {"kind": "text", "text": f"{metric} in percent, mean over {n_models} model{'s' if n_models != 1 else ''} "
                                 f"(clean {_pct(summary['clean'])}; {n_text}). Every change is against clean: "
                                 "shifted minus clean, so a negative number is a loss. The mean columns average "
                                 "a family's conditions (what the headline shows); the worst columns take the "
                                 "family's worst condition, as the paper's Table 1 does. Controls (object only, "
                                 "background only) and the attack (adversarial backgrounds) have their own rows "
                                 "and are never averaged into a background family."},
        {"kind": "table",
         "head": ["family", "role", "conditions", f"mean {metric}", "mean change against clean", "worst condition",
                  f"worst {metric}", "worst change against clean"],
         "rows": []},
    ]
    table = blocks[1]
    for family, e in summary["families"].items():
        k = len(e["conditions"])
        table["rows"].append([family, e["role"], str(k),
                              cell(_pct(e["mean"]), f"mean of {k} condition{'s' if k != 1 else ''}; {n_text}"),
                              _change_cell(e["mean_change"], n_text), e["worst"],
                              cell(_pct(e["value"]), n_text), _change_cell(e["change"], n_text)])
    blocks.append({"kind": "heading", "text": "The paper's ordering"})
    blocks.append({"kind": "text", "text": "Class label >= caption > colour ~ texture >> adversarial, on the worst "
                                           "values; scene stands in for the natural prompts on the compose backend; "
                                           f"~ means within {100 * SIMILAR:.0f} points, >> at least {100 * FAR:.0f} "
                                           "points lower. Controls take no part."})
    blocks.append({"kind": "list", "items": [f"{check}: " + ("n/a" if ok is None else ("holds" if ok else "does not hold"))
                                             for check, ok in summary["ordering"].items()]})
    verdict = summary["holds"]
    blocks.append({"kind": "text", "text": "Overall: " + ("n/a" if verdict is None else
                                                          ("the ordering holds" if verdict else "the ordering does not hold"))})
    models = sorted({m for e in summary["families"].values() for m in e["per_model"]})
    if len(models) > 1:  # with one model the table above already is the per-model one
        blocks.append({"kind": "heading", "text": "Per model (family mean, change against clean)"})
        rows = []
        for family, e in summary["families"].items():
            row = [family, e["role"]]
            for m in models:
                pm = e["per_model"].get(m)
                if pm is None:
                    row.append("–")
                    continue
                n = pm.get("n")
                title = (f"mean of the family's conditions; worst: {pm['worst']} {_pct(pm['value'])} "
                         f"({_signed(pm['change'])}); " + (f"n = {n} images" if n else "n not recorded"))
                cls = None if pm["mean_change"] is None or pm["mean_change"] == 0 else (
                    "down" if pm["mean_change"] < 0 else "up")
                row.append(cell(f"{_pct(pm['mean'])} ({_signed(pm['mean_change'])})", title, cls))
            rows.append(row)
        blocks.append({"kind": "table", "head": ["family", "role"] + models, "rows": rows})
    return blocks


def summary_blocks(rows: Iterable[dict[str, Any]], metric: str = "top1") -> list[dict[str, Any]]:
    """The ObjectCompose summary of ``rows`` as report blocks; empty when no row belongs to a family."""
    summary = summarise(rows, metric)
    return blocks_from_summary(summary) if summary["families"] else []


def to_markdown(summary: dict[str, Any]) -> str:
    """The summary as a Markdown section (the export of :func:`blocks_from_summary`, values x100)."""
    return blocks_to_markdown([{"kind": "heading", "level": 2, "text": f"{TITLE} ({summary['metric']})"}]
                              + blocks_from_summary(summary))


def write_summary(store: str | os.PathLike, out: str | os.PathLike, run_id: str | None = None,
                  metric: str = "top1") -> Path:
    """Write ``objectcompose.md`` and ``objectcompose.json`` for a run of ``store`` into ``out``."""
    from ..engine.store import Store

    db = Store(store, create=False)
    try:
        run = db.run(run_id)
        rows = db.rows(run["run_id"])
    finally:
        db.close()
    summary = summarise(rows, metric)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "objectcompose.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    path = out / "objectcompose.md"
    path.write_text(to_markdown(summary), encoding="utf-8")
    return path


if __name__ == "__main__":  # python -m shiftbench.report.objectcompose STORE OUT
    import sys

    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m shiftbench.report.objectcompose STORE OUT_DIR")
    print(write_summary(sys.argv[1], sys.argv[2]).read_text())
