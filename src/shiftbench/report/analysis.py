"""The report's analysis views, from what ``shiftbench evaluate`` stored (shiftbench.analysis): the
background-reliance table (summary blocks), the Grad-CAM grids and the feature embedding (figures).
Nothing here runs a model."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from ..metrics.uncertainty import bootstrap_mean
from ..severity import Severity
from ..severity import label as severity_label
from .blocks import cell
from .tables import CLEAN, condition_label

__all__ = ["reliance_table", "analysis_blocks", "analysis_figures"]


def _label(shift: str, params: dict[str, Any], severity: Severity) -> str:
    """'fog s3', 'fog s2.5' (never 's3.0', never 2.5 merged into 2), or 'clean'."""
    return "clean" if shift == CLEAN else f"{condition_label(shift, params)} s{severity_label(severity)}"


def reliance_table(rows: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """{"models", "conditions", "cells": {(condition, model): {mean, low, high, n, delta, delta_low, delta_high}}}:
    the mean share of Grad-CAM mass outside the object mask, its 95% bootstrap interval, and the change
    against clean paired on the same samples (its interval too)."""
    models = list(dict.fromkeys(r["model"] for r in rows))  # in the stored order
    conditions: list[str] = []
    by: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        label = _label(r["shift"], r["params"], r["severity"])
        if label not in conditions:
            conditions.append(label)
        by[(label, r["model"])] = r
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for (label, model), r in by.items():
        values = dict(zip(r["ids"], r["values"]))
        kept = [v for v in values.values() if v is not None]
        if not kept:
            continue
        mean, low, high = bootstrap_mean(kept, seed=seed)
        out = {"mean": mean, "low": low, "high": high, "n": len(kept)}
        clean = by.get(("clean", model))
        if clean is not None and label != "clean":
            base = dict(zip(clean["ids"], clean["values"]))
            diffs = [values[i] - base[i] for i in values if values[i] is not None and base.get(i) is not None]
            if diffs:
                d, dl, dh = bootstrap_mean(diffs, seed=seed)
                out.update(delta=d, delta_low=dl, delta_high=dh)
        cells[(label, model)] = out
    return {"models": models, "conditions": conditions, "cells": cells}


def analysis_blocks(stored: dict[str, Any], seed: int = 0) -> list[dict[str, Any]]:
    """Summary blocks of the reliance view (empty without one)."""
    rows = stored.get("reliance") or []
    if not rows:
        return []
    table = reliance_table(rows, seed)
    head = ["condition"] + table["models"]
    body = []
    for label in table["conditions"]:
        line: list[Any] = [label]
        for model in table["models"]:
            c = table["cells"].get((label, model))
            if c is None:
                line.append("–")
                continue
            text = f"{100 * c['mean']:.1f} [{100 * c['low']:.1f}, {100 * c['high']:.1f}]"
            title = f"n = {c['n']} images"
            cls = None
            if "delta" in c:
                text += f"; {100 * c['delta']:+.1f} [{100 * c['delta_low']:+.1f}, {100 * c['delta_high']:+.1f}]"
                title += f"; change against clean {100 * c['delta']:+.1f} points [{100 * c['delta_low']:+.1f}, " \
                         f"{100 * c['delta_high']:+.1f}], paired"
                if c["delta_low"] <= 0 <= c["delta_high"]:
                    cls = "noise"
                else:
                    cls = "up" if c["delta"] > 0 else "down"
            line.append(cell(text, title, cls))
        body.append(line)
    return [
        {"kind": "heading", "text": "Background reliance (Grad-CAM mass outside the object mask, %)"},
        {"kind": "text", "text": "The share of each image's Grad-CAM attribution (for the class the model predicts, "
                                 "unless the spec says label) that falls outside the object mask, averaged over "
                                 "the images, with its 95% bootstrap interval; after the semicolon, the change "
                                 "against clean on the same images (points) with its paired 95% interval. Higher means the model looks at the background "
                                 "more; an up-coloured cell is a rise whose interval excludes zero."},
        {"kind": "table", "head": head, "rows": body},
    ]


def analysis_figures(stored: dict[str, Any], out: Path, prefix: str, save: Any) -> list[dict[str, str]]:
    """Grad-CAM grids (one per model: rows = samples, columns = conditions) and t-SNE scatters."""
    import cv2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []
    grads = stored.get("gradcam") or []
    by_model: dict[str, dict[str, Any]] = {}
    for item in grads:
        meta = item["meta"] or {}
        model = meta.get("model", "?")
        entry = by_model.setdefault(model, {"columns": [], "rows": [], "images": {}})
        column = _label(meta["shift"], json.loads(meta["params_key"]), meta["severity"])
        if column not in entry["columns"]:
            entry["columns"].append(column)
        if meta["sample_id"] not in entry["rows"]:
            entry["rows"].append(meta["sample_id"])
        entry["images"][(meta["sample_id"], column)] = item["data"]
    for k, (model, entry) in enumerate(by_model.items()):
        columns = sorted(entry["columns"], key=lambda c: (c != "clean", entry["columns"].index(c)))
        rows = entry["rows"]
        fig, axes = plt.subplots(len(rows), len(columns), figsize=(1.3 * len(columns) + 0.4, 1.35 * len(rows) + 0.6),
                                 squeeze=False)
        for i, sid in enumerate(rows):
            for j, column in enumerate(columns):
                ax = axes[i][j]
                ax.axis("off")
                data = entry["images"].get((sid, column))
                if data is not None:
                    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
                    ax.imshow(img)
                if i == 0:
                    ax.set_title(textwrap.fill(column, 24), fontsize=5)
        fig.suptitle(f"Grad-CAM, {model}", fontsize=8)
        fig.tight_layout()
        figures.append(_save_jpeg(fig, out, f"{prefix}gradcam_{k + 1}.jpg", f"Grad-CAM: {model}",
                            "Grad-CAM of the predicted class over each image (red: most attribution), clean first, "
                            "then each condition on the same images."))
        plt.close(fig)
    embedding = stored.get("embedding") or {}
    for k, (model, e) in enumerate(embedding.items()):
        pts = np.asarray(e["points"], float)
        cond = np.asarray(e["condition"], int)
        labels = [_label(c["shift"], c["params"], c["severity"]) for c in e["conditions"]]
        fig, ax = plt.subplots(figsize=(5.2, 4.0))
        cmap = plt.get_cmap("tab20")
        for ci, label in enumerate(labels):
            sel = cond == ci
            if not sel.any():
                continue
            style = {"marker": "o", "s": 10, "edgecolors": "k", "linewidths": 0.3} if label == "clean" else {"s": 7}
            ax.scatter(pts[sel, 0], pts[sel, 1], color=cmap(ci % 20), label=label, alpha=0.85, **style)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.legend(fontsize=5, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
        ax.set_title(f"t-SNE of penultimate features, {model}", fontsize=8)
        fig.tight_layout()
        figures.append(save(fig, out, f"{prefix}embedding_{k + 1}.png", f"Feature embedding: {model}",
                            "t-SNE (scikit-learn) of the penultimate features of the same images clean and under "
                            "each condition, coloured by condition: shifted images that leave the clean cloud are "
                            "the ones the classifier sees differently."))
        plt.close(fig)
    return figures


def _save_jpeg(fig: Any, out: Path, name: str, title: str, caption: str) -> dict[str, str]:
    """A figure of photographs as JPEG (a PNG of them is five times larger in the self-contained HTML)."""
    import base64
    import io

    import cv2

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    rgba = cv2.imdecode(np.frombuffer(buf.getvalue(), np.uint8), cv2.IMREAD_COLOR)
    ok, jpg = cv2.imencode(".jpg", rgba, [cv2.IMWRITE_JPEG_QUALITY, 85])
    data = jpg.tobytes()
    (out / name).write_bytes(data)
    return {"title": title, "caption": caption, "file": name,
            "src": "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")}
