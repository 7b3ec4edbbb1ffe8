"""ObjectCompose summary from result rows: each prompt family's mean and worst condition, their change
against clean, the controls and the attack in their own rows, and whether the paper's ordering
(class label >= caption > colour ~ texture >> adversarial) holds.

Families: each background shift declares its conditions' family (registry ``ShiftInfo.compose``): colour,
texture, ``scene`` (``background_scene``; ``mixed_same`` / ``mixed_rand`` for another congruent scene, the
compose stand-in for the natural class-label and caption backgrounds / an incongruent one; their difference is
the BG-Gap, :func:`bg_gap`), the two controls, adversarial; ``background_inpaint``'s prompt names its family
(``class_label``, ``caption``, ``colorN``, ``textureN``, else custom).
Each family has a role, what it is: ``natural scene`` (class label, caption, scene, Mixed-Same, Mixed-Rand),
``synthetic background`` (vivid colours, textures), ``custom prompt`` (an inpainting prompt of the user's),
``control`` (``object_only``, ``background_only``: masking conditions, 0 % by construction for
``background_only``) or ``attack`` (``adversarial``, white-box). Controls and attacks are never averaged
into a background family.

One sign convention: every ``change`` is shifted minus clean (a background that lowers top-1 gives a
negative change). Two aggregates per family: ``mean`` (over the family's conditions, what the report's
headline shows) and ``worst`` (the paper's Table 1: the worst prompt of the mean over classifiers).
The ordering checks use the worst values: ``>=`` and ``>`` literally, ``~`` as within ``SIMILAR``
(5 points), ``>>`` as at least ``FAR`` (20 points) lower.

The paper's Table 1 (``PAPER_TABLE1``) sits beside ours only when the run follows the paper's protocol
(:func:`paper_protocol`: top-1, curated, every family of the table with the paper's four colour and four
texture prompts); otherwise one line says why there is no comparison. The same ``_ordering`` function
decides the ordering on our worst values and on the paper's, so both verdicts are computed. The adversarial family is
also split by the attack's source model (``ShiftInfo.source``): the attacked model's rows are white-box, every
other model's rows are transfer. The ordering check keeps the paper's definition of the adversarial family
(the mean over all classifiers, white-box and transfer together: the paper attacks one of its seven).

>>> rows = [dict(model="m", shift="clean", params={}, severity=0, metric="top1", value=0.9, n=10),
...         dict(model="m", shift="background_color", params={"color": "red"}, severity=5, metric="top1", value=0.7, n=10),
...         dict(model="m", shift="background_color", params={"color": "blue"}, severity=5, metric="top1", value=0.6, n=10)]
>>> s = summarise(rows)
>>> c = s["families"]["color"]
>>> c["worst"], round(c["change"], 3), round(c["mean"], 3), round(c["mean_change"], 3), c["role"]
('background_color (color=blue) s5', -0.3, 0.65, -0.25, 'synthetic background')
>>> s["paper_protocol"]["matches"]  # two colours, not curated: no comparison with the paper
False
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from ..registry import shift_info
from ..results.records import load
from ..severity import Severity, canonical
from ..severity import label as severity_label
from .blocks import blocks_to_markdown, cell
from .stats import Uncertainty

__all__ = ["family_of", "role_of", "attack_source", "summarise", "summary_blocks", "blocks_from_summary",
           "to_markdown", "write_summary", "FAMILY_ORDER", "ROLES", "SIMILAR", "FAR", "TITLE", "PAPER_TABLE1",
           "SIDE_BY_SIDE", "bg_gap", "paper_protocol", "PAPER_PROMPTS", "NATURAL_FAMILIES",
           "SYNTHETIC_FAMILIES", "CUSTOM_FAMILIES", "CONTROLS", "ATTACKS", "ROLE_GROUPS"]

FAMILY_ORDER = ("class_label", "caption", "scene", "mixed_same", "mixed_rand", "color", "texture", "custom",
                "adversarial", "object_only", "background_only")
# what each family is (issue 27): natural scenes (a scene photo, or a scene prompted from the class or the
# caption), synthetic backgrounds (vivid colours, textures), a user's own prompt, the masking controls and
# the attack; the headline and the demo group the families by these, never colour and texture as "natural"
NATURAL_FAMILIES = ("class_label", "caption", "scene", "mixed_same", "mixed_rand")
SYNTHETIC_FAMILIES = ("color", "texture")
CUSTOM_FAMILIES = ("custom",)
CONTROLS = ("object_only", "background_only")
ATTACKS = ("adversarial",)
ROLES = {**{f: "natural scene" for f in NATURAL_FAMILIES}, **{f: "synthetic background" for f in SYNTHETIC_FAMILIES},
         **{f: "custom prompt" for f in CUSTOM_FAMILIES}, **{f: "control" for f in CONTROLS},
         **{f: "attack" for f in ATTACKS}}
# the headline's group of each role, in display order
ROLE_GROUPS = {"natural scene": "natural scenes", "synthetic background": "synthetic backgrounds",
               "custom prompt": "custom prompts", "control": "controls", "attack": "attacks"}
SIMILAR = 0.05
FAR = 0.20
TITLE = "ObjectCompose summary"

# Source: ObjectCompose paper, Table 1, ImageNet-B_1000, top-1 in percent, mean of 7 classifiers
# (ViT-T, ViT-S, Res-50, Res-152, Dense-161, Swin-T, Swin-S); each family is its worst prompt. The
# adversarial background is optimised against Res-50 and scored on all seven (mostly transfer).
PAPER_TABLE1: dict[str, float] = {"clean": 97.71, "class_label": 94.70, "caption": 91.08, "color": 83.37,
                                  "texture": 81.55, "adversarial": 21.65}
PAPER_NAME = "ObjectCompose Table 1 (ImageNet-B_1000, mean of 7 classifiers)"
PAPER_PROMPTS = 4  # the paper's colour and texture families are the worst of 4 prompts each (its Table 6)
GAP_SOURCE = "Xiao et al., Noise or Signal: The Role of Image Backgrounds in Object Recognition, ICLR 2021"

# The side-by-side rows: (row key, our family, part of the adversarial family or None, paper key or None)
SIDE_BY_SIDE: tuple[tuple[str, str, str | None, str | None], ...] = (
    ("clean", "clean", None, "clean"), ("class_label", "class_label", None, "class_label"),
    ("caption", "caption", None, "caption"), ("scene", "scene", None, None),
    ("mixed_same", "mixed_same", None, None), ("mixed_rand", "mixed_rand", None, None), ("color", "color", None, "color"),
    ("texture", "texture", None, "texture"), ("adversarial (all models)", "adversarial", None, "adversarial"),
    ("adversarial white-box", "adversarial", "whitebox", None),
    ("adversarial transfer", "adversarial", "transfer", None))


def family_of(shift: str, params: dict[str, Any] | None) -> str | None:
    """The ObjectCompose family of a condition: its shift's declared ``compose`` (registry ShiftInfo), where
    an inpainting prompt or a Mixed-Same / Mixed-Rand scene names its own; None outside the protocol."""
    params, family = params or {}, shift_info(shift).compose
    if family == "prompt":
        prompt = str(params.get("prompt", "class_label")).rstrip("0123456789")
        return prompt if prompt in ("class_label", "caption", "color", "texture") else "custom"
    if family == "scene" and params.get("scene") in ("mixed_same", "mixed_rand"):
        return str(params["scene"])
    return family


def attack_source(shift: str, params: dict[str, Any] | None) -> str | None:
    """The model an adversarial condition optimises against (white-box for it, transfer for the rest), or
    None for a shift that is no attack or a source given as an object rather than a registered name. The shift
    declares the parameter that names it and its default (registry ShiftInfo.source)."""
    if (declared := shift_info(shift).source) is None:
        return None
    key, default = declared
    source = (params or {}).get(key, default)
    return source if isinstance(source, str) and source != "custom" else None


def role_of(family: str) -> str:
    """What a family is (``ROLES``: natural scene, synthetic background, control, attack); any other family is
    a user's inpainting prompt, ``"custom prompt"``."""
    return ROLES.get(family, "custom prompt")


def _label(shift: str, params: dict[str, Any], severity: Severity) -> str:
    inner = ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in ("mask", "dilation"))
    sev = severity_label(severity)  # 3 or 2.5, never 3.0
    return f"{shift} ({inner}) s{sev}" if inner else f"{shift} s{sev}"


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def summarise(rows: Iterable[dict[str, Any]], metric: str = "top1", unc: Any = None,
              curated: bool = False) -> dict[str, Any]:
    """Per family: the mean over its conditions and the worst condition (of the model mean), each with its
    change against clean (shifted - clean), and the same per model.

    Returns ``{"metric", "clean", "clean_per_model", "n_per_model", "families": {family: {"role",
    "conditions", "mean", "mean_change", "worst", "value", "change", "per_model": {model: {"mean",
    "mean_change", "worst", "value", "change", "n"}}}}, "ordering": {check: True | False | None},
    "holds": bool | None, "adversarial_whitebox", "adversarial_transfer", "paper"}``; ``value`` / ``change``
    are the worst condition's (the paper's Table 1), ``n`` its distinct sample counts and ``models`` how many
    models its mean covers. ``adversarial_whitebox`` / ``adversarial_transfer``: ``{"conditions", "models",
    "mean", "mean_change", "worst", "value", "change", "n"}`` over the attacked model's rows / every other
    model's rows (None when there are none). ``paper``: ``{"source", "clean", "families": {family: {"value",
    "change"}}, "ordering", "holds"}`` from ``PAPER_TABLE1``, its ordering computed like ours. ``bg_gap``
    (None unless the run has both Mixed-Same and Mixed-Rand): see :func:`bg_gap`; ``unc`` (a
    ``stats.Uncertainty`` of the run) adds its confidence intervals. ``paper_protocol``: ``{"matches",
    "why"}``, whether the run follows the paper's protocol (:func:`paper_protocol`; ``curated``: the run kept
    only the images its classifiers get right on clean, the spec's ``curate:``); the paper's values are shown
    beside ours only when it does.
    """
    values: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)  # (condition, family) -> model -> value
    counts: dict[tuple[str, str], int] = {}  # (condition, model) -> n
    sources: dict[str, str | None] = {}  # adversarial condition -> its source model
    conds: dict[str, tuple[str, dict[str, Any], Severity]] = {}  # condition label -> (shift, params, severity)
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
            severity = canonical(r.get("severity") or 0)
            label = _label(r["shift"], params, severity)
            values[(label, family)][r["model"]] = float(r["value"])
            conds[label] = (r["shift"], params, severity)
            counts[(label, r["model"])] = int(r.get("n") or 0)
            if family == "adversarial":
                sources[label] = attack_source(r["shift"], params)
    models = sorted(clean)
    clean_mean = sum(clean.values()) / len(clean) if clean else None
    by_family: dict[str, list[tuple[str, dict[str, float]]]] = defaultdict(list)
    for (label, family), per_model in values.items():
        by_family[family].append((label, per_model))
    families = {family: _family_entry(family, by_family[family], models, clean, clean_mean, counts)
                for family in [f for f in FAMILY_ORDER if f in by_family] + sorted(set(by_family) - set(FAMILY_ORDER))}
    split = {part: _attack_part(by_family.get("adversarial", []), sources, clean, counts, part)
             for part in ("whitebox", "transfer")}
    for e in families.values():  # distinct variants (prompts, colours, textures), whatever their severities
        e["variants"] = len({(conds[label][0], json.dumps(conds[label][1], sort_keys=True, default=str))
                             for label in e["conditions"]})
    ordering = _ordering({f: e["value"] for f, e in families.items()})
    why = paper_protocol(metric, families, curated)
    return {"metric": metric, "clean": clean_mean, "clean_per_model": clean, "n_per_model": clean_n,
            "families": families, "ordering": ordering, "holds": _verdict(ordering),
            "adversarial_whitebox": split["whitebox"], "adversarial_transfer": split["transfer"],
            "bg_gap": bg_gap(by_family.get("mixed_same", []), by_family.get("mixed_rand", []), conds, counts,
                             metric, unc),
            "paper": _paper_summary(), "paper_protocol": {"matches": not why, "why": why}}


def paper_protocol(metric: str, families: dict[str, Any], curated: bool) -> list[str]:
    """Why a run's summary cannot sit beside the paper's Table 1; empty when it can. The paper's protocol,
    as far as a run can show it: top-1; curated (the paper scores only the images all its classifiers get
    right on clean, ImageNet-B); and every family of its Table 1, each the worst of its prompts: the natural
    prompts (class label and caption, or Mixed-Same standing in on the compose backend), colour and
    texture with the paper's ``PAPER_PROMPTS`` prompts each, and the adversarial background.

    >>> paper_protocol("top1", {"texture": {"variants": 1}}, curated=False)[0]
    'the run is not curated (the paper scores only the images all its classifiers get right on clean; add curate: true to the spec)'
    """
    why = []
    if metric != "top1":
        why.append(f"the paper's Table 1 is top-1, this summary is {metric}")
    if not curated:
        why.append("the run is not curated (the paper scores only the images all its classifiers get right on "
                   "clean; add curate: true to the spec)")
    missing = []
    if not ({"class_label", "caption"} <= set(families) or "mixed_same" in families):
        missing.append("the natural prompts (class label and caption, or Mixed-Same on the compose backend)")
    for family in ("color", "texture"):
        k = (families.get(family) or {}).get("variants", 0)
        if k < PAPER_PROMPTS:
            missing.append(f"{family} ({k} of the paper's {PAPER_PROMPTS} prompts)")
    if "adversarial" not in families:
        missing.append("the adversarial background")
    if missing:
        why.append("it lacks " + ", ".join(missing))
    return why


def _family_entry(family: str, conditions: list[tuple[str, dict[str, float]]], models: list[str],
                  clean: dict[str, float], clean_mean: float | None,
                  counts: dict[tuple[str, str], int]) -> dict[str, Any]:
    """One family of :func:`summarise`: its mean and worst condition (of the model mean) with their change
    against clean, and the same per model."""
    entry: dict[str, Any] = {"role": role_of(family), "conditions": [label for label, _ in conditions],
                             "mean": None, "mean_change": None, "worst": None, "value": None, "change": None,
                             "n": [], "models": 0, "per_model": {}}
    means = []
    for label, per_model in conditions:
        # the model mean of a condition over the models that have a clean value too, so its change is fair
        shared = [m for m in models if m in per_model] or sorted(per_model)
        mean = sum(per_model[m] for m in shared) / len(shared)
        means.append(mean)
        if entry["value"] is None or mean < entry["value"]:  # ties keep the first (spec order)
            entry.update(worst=label, value=mean, change=_sub(mean, clean_mean), n=_ns(counts, label, shared),
                         models=len(shared))
    entry["mean"] = sum(means) / len(means)
    entry["mean_change"] = _sub(entry["mean"], clean_mean)
    for m in sorted({m for _, pm in conditions for m in pm}):
        own = [(label, pm[m]) for label, pm in conditions if m in pm]
        worst_label, worst = min(own, key=lambda lv: lv[1])
        mean = sum(v for _, v in own) / len(own)
        entry["per_model"][m] = {"mean": mean, "mean_change": _sub(mean, clean.get(m)),
                                 "worst": worst_label, "value": worst, "change": _sub(worst, clean.get(m)),
                                 "n": counts.get((own[0][0], m))}
    return entry


def _paper_summary() -> dict[str, Any]:
    """The paper's Table 1 (``PAPER_TABLE1``) as fractions, with its change against clean and its ordering."""
    paper = {f: v / 100.0 for f, v in PAPER_TABLE1.items()}
    paper_ordering = _ordering({f: v for f, v in paper.items() if f != "clean"})
    return {"source": PAPER_NAME, "clean": paper["clean"],
            "families": {f: {"value": v, "change": v - paper["clean"]} for f, v in paper.items() if f != "clean"},
            "ordering": paper_ordering, "holds": _verdict(paper_ordering)}


def bg_gap(same: list[tuple[str, dict[str, float]]], rand: list[tuple[str, dict[str, float]]],
           conds: dict[str, tuple[str, dict[str, Any], int]], counts: dict[tuple[str, str], int], metric: str,
           unc: Any = None) -> dict[str, Any] | None:
    """The BG-Gap of Xiao et al. ("Noise or Signal", ICLR 2021): accuracy on Mixed-Same (another congruent
    scene) minus accuracy on Mixed-Rand (an incongruent scene), per model and for the mean over the models
    that have both; each side is the mean over its conditions. A positive gap: the model leans on the
    background matching the object. With ``unc`` each gap gets its paired 95% bootstrap interval and p-value
    (the same images under both; ``Uncertainty.contrast``). None unless both families are in the run.

    ``{"source", "per_model": {model: {"same", "rand", "gap", "low", "high", "p_value", "noise", "n"}},
    "mean": {...the same over the models...}, "models"}``"""
    if not same or not rand:
        return None
    models = sorted({m for _, pm in same for m in pm} & {m for _, pm in rand for m in pm})
    if not models:
        return None

    def side(conditions, chosen):
        vals = [pm[m] for _, pm in conditions for m in chosen if m in pm]
        return sum(vals) / len(vals) if vals else None

    def entry(chosen: list[str]) -> dict[str, Any]:
        s_, r_ = side(same, chosen), side(rand, chosen)
        out = {"same": s_, "rand": r_, "gap": _sub(s_, r_), "low": None, "high": None, "p_value": None,
               "noise": None, "test": None, "n": sorted({counts[(label, m)] for label, _ in same + rand for m in chosen
                                           if counts.get((label, m))})}
        if unc is not None and all(unc.has(m, metric) for m in chosen):
            res = unc.contrast(chosen, metric, [conds[label] for label, _ in same], [conds[label] for label, _ in rand])
            if res is not None:
                out.update(low=res["low"], high=res["high"], p_value=res["p_value"], noise=res["noise"],
                           test=res.get("test"))
        return out

    return {"source": GAP_SOURCE, "models": models, "per_model": {m: entry([m]) for m in models},
            "mean": entry(models)}


def _ns(counts: dict[tuple[str, str], int], label: str, models: Iterable[str]) -> list[int]:
    """The distinct sample counts of a condition over ``models`` (one number when every model saw the same)."""
    return sorted({counts[(label, m)] for m in models if counts.get((label, m))})


def _verdict(ordering: dict[str, bool | None]) -> bool | None:
    decided = [v for v in ordering.values() if v is not None]
    return all(decided) if decided else None


def _attack_part(conditions: list[tuple[str, dict[str, float]]], sources: dict[str, str | None],
                 clean: dict[str, float], counts: dict[tuple[str, str], int], part: str) -> dict[str, Any] | None:
    """The white-box or transfer part of the adversarial family: per condition, the mean over the models that
    part takes (the source model for white-box, every other model for transfer); the family's mean and worst
    condition over those, and the change against the same models' clean mean. None when no row belongs."""
    means: list[tuple[float, float | None]] = []
    entry: dict[str, Any] = {"conditions": [], "models": [], "mean": None, "mean_change": None, "worst": None,
                             "value": None, "change": None, "n": []}
    for label, per_model in conditions:
        source = sources.get(label)
        if source is None:
            continue  # an unnamed source model: neither part can be told
        chosen = sorted(m for m in per_model if (m == source) == (part == "whitebox"))
        if not chosen:
            continue
        mean = sum(per_model[m] for m in chosen) / len(chosen)
        own_clean = [clean[m] for m in chosen if m in clean]
        base = sum(own_clean) / len(own_clean) if len(own_clean) == len(chosen) else None
        means.append((mean, base))
        entry["conditions"].append(label)
        entry["models"] = sorted(set(entry["models"]) | set(chosen))
        if entry["value"] is None or mean < entry["value"]:
            entry.update(worst=label, value=mean, change=_sub(mean, base), n=_ns(counts, label, chosen))
    if not means:
        return None
    entry["mean"] = sum(m for m, _ in means) / len(means)
    bases = [b for _, b in means]
    entry["mean_change"] = None if None in bases else entry["mean"] - sum(bases) / len(bases)
    return entry


def _ordering(v: dict[str, float]) -> dict[str, bool | None]:
    """The paper's ordering, piece by piece, on the worst values; None where a family is missing. Controls
    never take part; the adversarial family only where the paper compares it."""
    # the paper's natural families are its class-label and caption prompts; on the compose backend another
    # congruent scene (Mixed-Same) stands in for them, and failing that any other scene
    natural = ([f for f in ("class_label", "caption", "mixed_same") if f in v]
               or [f for f in ("scene",) if f in v])
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


def _word(ok: bool | None) -> str:
    return "n/a" if ok is None else ("holds" if ok else "does not hold")


def _overall(ok: bool | None) -> str:
    return "n/a" if ok is None else ("the ordering holds" if ok else "the ordering does not hold")


def _n_cell(ns: list[int] | None, models: int | list[str] | None) -> str | dict[str, Any]:
    if not ns:
        return "–"
    k = models if isinstance(models, int) else len(models or [])
    return cell("/".join(str(n) for n in ns), f"images per model and condition; {k} model{'s' if k != 1 else ''}")


def _side_by_side_blocks(summary: dict[str, Any], n_text: str) -> list[dict[str, Any]]:
    """The table "ours vs the paper": per family our worst condition and its change against clean beside the
    paper's Table 1 value and its change against the paper's clean, and n."""
    paper = summary.get("paper") or {}
    metric = summary["metric"]
    rows = []
    for key, family, part, paper_key in SIDE_BY_SIDE:
        if family == "clean":
            ours = {"worst": "clean", "value": summary["clean"], "change": None,
                    "n": sorted(set(summary.get("n_per_model", {}).values()) - {0}),
                    "models": len(summary["clean_per_model"])}
        elif part is not None:
            ours = summary.get(f"adversarial_{part}")
        else:
            ours = summary["families"].get(family)
        if paper_key is None:
            p_value = p_change = None
            why = {"scene": "ours only: another scene photo (a named one or any other)",
                   "mixed_same": "ours only: another scene congruent with the object (ImageNet-9's Mixed-Same), "
                                 "the compose stand-in for the paper's class-label and caption prompts",
                   "mixed_rand": "ours only: a scene sharing no context with the object (ImageNet-9's Mixed-Rand)",
                   }.get(family, "the paper reports the mean over its 7 classifiers only (the attacked Res-50 "
                                 "among them)")
        elif paper_key == "clean":
            p_value, p_change, why = paper.get("clean"), None, paper.get("source", "")
        else:
            pf = paper.get("families", {}).get(paper_key, {})
            p_value, p_change, why = pf.get("value"), pf.get("change"), paper.get("source", "")
        if ours is None and p_value is None and not (part and "adversarial" in summary["families"]):
            continue  # neither side has the row: nothing to compare (an empty split part still shows as "–")
        ours = ours or {}
        models = ours.get("models")
        model_note = (f"; models: {', '.join(models)}" if isinstance(models, list) and models else "")
        rows.append([key, ours.get("worst") or "–",
                     "–" if ours.get("value") is None else cell(_pct(ours["value"]), f"worst condition; {n_text}"
                                                                + model_note),
                     _change_cell(ours.get("change"), n_text) if family != "clean" else "–",
                     "–" if p_value is None else cell(f"{100 * p_value:.2f}", why),
                     cell("–", why) if p_change is None and p_value is None else (
                         "–" if p_change is None else cell(f"{100 * p_change:+.2f}", "paper value - paper clean",
                                                           "down" if p_change < 0 else None)),
                     _n_cell(ours.get("n"), models)])
    text = (f"{metric} in percent. Ours: the family's worst condition (mean over the models) and its change "
            "against our clean; the paper: its Table 1 value (the worst prompt, mean of 7 classifiers, "
            "ImageNet-B_1000) and its change against the paper's clean. The adversarial family is split by the "
            "attack's source model: white-box rows are the attacked model's, transfer rows every other model's. "
            "n: images per model and condition.")
    head = ["family", "our worst condition", f"ours {metric}", "ours change", f"paper {metric}", "paper change", "n"]
    return _section("Ours vs the paper", text, head, rows)


def _section(title: str, text: str, head: list[str], rows: list[list[Any]]) -> list[dict[str, Any]]:
    """A heading, a paragraph and a table: one sub-section of the summary."""
    return [{"kind": "heading", "text": title}, {"kind": "text", "text": text},
            {"kind": "table", "head": head, "rows": rows}]


def _gap_cell(e: dict[str, Any]) -> str | dict[str, Any]:
    if e["gap"] is None:
        return "–"
    test = e.get("test") or "paired test"
    ci = (f"; 95% CI [{_signed(e['low'])}, {_signed(e['high'])}] ({test})"
          if e.get("low") is not None else "; no per-sample values: no CI")
    p = f"; p = {e['p_value']:.3g} ({test}){'; ≈: p >= 0.05' if e.get('noise') else ''}" \
        if e.get("p_value") is not None else ""
    return cell(_signed(e["gap"]) + (" ≈" if e.get("noise") else ""),
                "Mixed-Same - Mixed-Rand in points" + ci + p, None if e.get("noise") else
                ("down" if e["gap"] > 0 else "up" if e["gap"] < 0 else None))


def _gap_blocks(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The BG-Gap table: per model (and their mean) Mixed-Same, Mixed-Rand, the gap and its 95% CI."""
    gap = summary.get("bg_gap")
    if not gap:
        return []
    metric = summary["metric"]
    rows = []
    lines = [(m, gap["per_model"][m]) for m in gap["models"]]
    if len(gap["models"]) > 1:
        lines.append((f"mean of {len(gap['models'])} models", gap["mean"]))
    for name, e in lines:
        ci = "–" if e.get("low") is None else f"[{_signed(e['low'])}, {_signed(e['high'])}]"
        rows.append([name, _pct(e["same"]), _pct(e["rand"]), _gap_cell(e), ci,
                     "–" if e.get("p_value") is None else f"{e['p_value']:.3g}",
                     "/".join(str(n) for n in e["n"]) or "–"])
    text = (f"{metric} in percent on the object moved to another scene congruent with it (Mixed-Same) and to a "
            "scene sharing no context with it (Mixed-Rand); the BG-Gap is their difference in points, as in Xiao "
            "et al., \"Noise or Signal\" (ICLR 2021). A positive gap means the model relies on the background "
            "fitting the object. p, ≈ and the 95% CI come from one paired test on the same images under both: "
            "exact McNemar for one model (top-1 right or wrong on each image), the paired bootstrap over the images "
            "for the mean of several models; ≈ marks p >= 0.05, and the CI then contains 0. n: images per model and "
            "condition.")
    head = ["model", f"Mixed-Same {metric}", f"Mixed-Rand {metric}", "BG-Gap (points)", "95% CI", "p", "n"]
    return _section("BG-Gap (Mixed-Same minus Mixed-Rand)", text, head, rows)


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
    protocol = summary.get("paper_protocol") or {"matches": True, "why": []}
    compared = bool(protocol["matches"])
    paper = summary.get("paper") or {}
    if compared:
        blocks += _side_by_side_blocks(summary, n_text)
    else:  # one line saying why: a run off the paper's protocol gets no "ours vs the paper"
        blocks.append({"kind": "text", "text": f"No comparison with {PAPER_NAME}: " + "; ".join(protocol["why"])
                                               + "."})
    blocks += _gap_blocks(summary)
    paper_ordering = paper.get("ordering", {})
    blocks.append({"kind": "heading", "text": "The paper's ordering"})
    blocks.append({"kind": "text", "text": "Class label >= caption > colour ~ texture >> adversarial, on the worst "
                                           "values; on the compose backend Mixed-Same (another congruent scene) stands "
                                           "in for the natural prompts, or any scene when there is none; "
                                           f"~ means within {100 * SIMILAR:.0f} points, >> at least {100 * FAR:.0f} "
                                           "points lower. Controls take no part. The adversarial family is all models "
                                           "together, as the paper scores its attack on all seven classifiers. "
                                           + ("Each check is computed on our values and on the paper's Table 1 by the "
                                              "same rule." if compared else
                                              "Checked on our values only (no comparison with the paper, above).")})
    blocks.append({"kind": "list", "items": [f"{check}: ours {_word(ok)}"
                                             + (f", paper {_word(paper_ordering.get(check))}" if compared else "")
                                             for check, ok in summary["ordering"].items()]})
    blocks.append({"kind": "text", "text": f"Overall, ours: {_overall(summary['holds'])}"
                                           + (f"; the paper's Table 1: {_overall(paper.get('holds'))}." if compared
                                              else ".")})
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


def summary_blocks(rows: Iterable[dict[str, Any]], metric: str = "top1", unc: Any = None,
                   curated: bool = False) -> list[dict[str, Any]]:
    """The ObjectCompose summary of ``rows`` as report blocks; empty when no row belongs to a family."""
    summary = summarise(rows, metric, unc, curated)
    return blocks_from_summary(summary) if summary["families"] else []


def to_markdown(summary: dict[str, Any]) -> str:
    """The summary as a Markdown section (the export of :func:`blocks_from_summary`, values x100)."""
    return blocks_to_markdown([{"kind": "heading", "level": 2, "text": f"{TITLE} ({summary['metric']})"}]
                              + blocks_from_summary(summary))


def write_summary(store: str | os.PathLike, out: str | os.PathLike, run_id: str | None = None,
                  metric: str = "top1") -> Path:
    """Write ``objectcompose.md`` and ``objectcompose.json`` for a run of ``store`` into ``out``."""

    run, = load(store, run_id, ("results", "samples", "curation"), check=False)
    summary = summarise(run.rows, metric, Uncertainty(run.samples, seed=run.seed) if run.samples else None,
                        run.curation is not None)
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
