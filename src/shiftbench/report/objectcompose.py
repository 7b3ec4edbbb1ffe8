"""ObjectCompose summary from result rows: each prompt family's worst condition, its drop against clean, and
whether the paper's ordering (class label >= caption > colour ~ texture >> adversarial) holds.

Families: ``background_inpaint`` / ``adversarial_diffusion`` are placed by their prompt (``class_label``,
``caption``, ``colorN``, ``textureN``); the weight-free backend maps ``background_color`` to colour,
``background_texture`` to texture, ``background_scene`` to ``scene`` (the compose stand-in for the natural
class-label and caption backgrounds) and ``adversarial_texture`` / ``adversarial_diffusion`` to adversarial;
``object_only`` and ``background_only`` are reported as the two masking conditions.

The paper reports, per family, the worst prompt of the mean over classifiers (Table 1); so does this, and
per model too. Ordering tests use that family value: ``>=`` and ``>`` literally, ``~`` as within
``SIMILAR`` (5 points), ``>>`` as at least ``FAR`` (20 points) lower.

>>> rows = [dict(model="m", shift="clean", params={}, severity=0, metric="top1", value=0.9),
...         dict(model="m", shift="background_color", params={"color": "red"}, severity=5, metric="top1", value=0.7),
...         dict(model="m", shift="background_color", params={"color": "blue"}, severity=5, metric="top1", value=0.6)]
>>> s = summarise(rows)
>>> s["families"]["color"]["worst"], round(s["families"]["color"]["drop"], 3)
('background_color (color=blue) s5', 0.3)
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

__all__ = ["family_of", "summarise", "to_markdown", "write_summary", "FAMILY_ORDER", "SIMILAR", "FAR"]

FAMILY_ORDER = ("class_label", "caption", "scene", "color", "texture", "adversarial", "object_only", "background_only")
SIMILAR = 0.05
FAR = 0.20


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


def _label(shift: str, params: dict[str, Any], severity: int) -> str:
    inner = ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in ("mask", "dilation"))
    return f"{shift} ({inner}) s{severity}" if inner else f"{shift} s{severity}"


def summarise(rows: Iterable[dict[str, Any]], metric: str = "top1") -> dict[str, Any]:
    """Per family: the worst condition of the model mean, its value and drop, and the same per model.

    Returns ``{"metric", "clean", "families": {family: {"worst", "value", "drop", "per_model": {...}}},
    "ordering": {check: True | False | None}, "holds": bool | None}``.
    """
    values: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)  # (condition, family) -> model -> value
    clean: dict[str, float] = {}
    for r in rows:
        if r.get("metric") != metric or r.get("value") is None:
            continue
        params = r.get("params") or {}
        if isinstance(params, str):
            params = json.loads(params)
        if r["shift"] == "clean":
            clean[r["model"]] = float(r["value"])
            continue
        family = family_of(r["shift"], params)
        if family is not None:
            values[(_label(r["shift"], params, int(r.get("severity") or 0)), family)][r["model"]] = float(r["value"])
    models = sorted(clean)
    clean_mean = sum(clean.values()) / len(clean) if clean else None
    families: dict[str, Any] = {}
    for (label, family), per_model in values.items():
        shared = [m for m in models if m in per_model] or sorted(per_model)
        mean = sum(per_model[m] for m in shared) / len(shared)
        entry = families.setdefault(family, {"worst": None, "value": None, "drop": None, "per_model": {}})
        if entry["value"] is None or mean < entry["value"]:
            entry.update(worst=label, value=mean,
                         drop=None if clean_mean is None else clean_mean - mean)
        for m, v in per_model.items():
            pm = entry["per_model"].get(m)
            if pm is None or v < pm["value"]:
                entry["per_model"][m] = {"worst": label, "value": v, "drop": clean[m] - v if m in clean else None}
    ordered = {f: families[f] for f in FAMILY_ORDER if f in families}
    ordered.update({f: v for f, v in families.items() if f not in ordered})
    ordering = _ordering({f: e["value"] for f, e in ordered.items()})
    decided = [v for v in ordering.values() if v is not None]
    return {"metric": metric, "clean": clean_mean, "clean_per_model": clean, "families": ordered,
            "ordering": ordering, "holds": all(decided) if decided else None}


def _ordering(v: dict[str, float]) -> dict[str, bool | None]:
    """The paper's ordering, piece by piece; None where a family is missing."""
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


def to_markdown(summary: dict[str, Any]) -> str:
    """The summary as a Markdown section (values x100 for fraction metrics such as top-1)."""
    pct = lambda x: "–" if x is None else f"{100 * x:.1f}"  # noqa: E731
    lines = [f"## ObjectCompose: worst condition per family ({summary['metric']}, mean over models)", "",
             f"Clean: {pct(summary['clean'])}", "",
             "| family | worst condition | value | drop vs clean |", "|---|---|---|---|"]
    for family, e in summary["families"].items():
        lines.append(f"| {family} | {e['worst']} | {pct(e['value'])} | {pct(e['drop'])} |")
    lines += ["", "Paper's ordering (class label >= caption > colour ~ texture >> adversarial; `scene` stands in "
              f"for the natural prompts on the compose backend; ~ = within {100 * SIMILAR:.0f} points, >> = at least "
              f"{100 * FAR:.0f} points):", ""]
    for check, ok in summary["ordering"].items():
        lines.append(f"- {check}: {'n/a' if ok is None else ('holds' if ok else 'does not hold')}")
    verdict = summary["holds"]
    lines += ["", f"Overall: {'n/a' if verdict is None else ('the ordering holds' if verdict else 'the ordering does not hold')}"]
    models = sorted({m for e in summary["families"].values() for m in e["per_model"]})
    if models:
        lines += ["", "Per model (worst value, drop):", "", "| family | " + " | ".join(models) + " |",
                  "|---|" + "---|" * len(models)]
        for family, e in summary["families"].items():
            cells = [f"{pct(e['per_model'][m]['value'])} ({pct(e['per_model'][m]['drop'])})" if m in e["per_model"]
                     else "–" for m in models]
            lines.append(f"| {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


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
