"""Shape bias of the bundled classifiers on the standard cue-conflict stimuli, beside the project's own set.

    python benchmarks/shape_bias_stimuli.py --stimuli ../shared/data/texture-vs-shape/cue-conflict --store stimuli.db \
        [--json benchmarks/results/shape_bias_stimuli.json]
    python benchmarks/shape_bias_stimuli.py --quick --store quick.db   # the 32 stimuli of tests/data, Lite0 only

Runs configs/shape_bias_stimuli.yaml through ``sb.evaluate`` (its dataset replaced by ``--stimuli`` when given;
the store resumes a run it holds) and prints, per model, the published protocol's shape bias (Geirhos et al.,
ICLR 2019: the 1,000 ImageNet outputs decide among 16 entry-level categories by the mean of each category's
softmax probabilities; images whose shape and texture classes agree are left out; shape / (shape + texture
decisions)) and the share of cue-conflict images decided by either cue, each with its 95% percentile bootstrap
CI over images as the report computes it (benchmarks/shape_bias.py's ``table``), and beside it the model's
shape bias on the project's own set ``objects-cue-conflict`` as docs/shape_bias.md quotes it (read from
benchmarks/results/shape_bias.json, not re-run). ``--quick`` reads the 32 shipped test stimuli
(tests/data/cue-conflict-subset) with Lite0 alone and never writes the committed results file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SPEC = ROOT / "configs" / "shape_bias_stimuli.yaml"
QUICK_STIMULI = ROOT / "tests" / "data" / "cue-conflict-subset"
OWN_SET = RESULTS / "shape_bias.json"  # objects-cue-conflict, measured by benchmarks/shape_bias.py


def _shape_bias_table():
    """benchmarks/shape_bias.py's ``table`` (a script, not a package: loaded from its file)."""
    spec = importlib.util.spec_from_file_location("bench_shape_bias", ROOT / "benchmarks" / "shape_bias.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.table


def run(stimuli: Path | None, store: Path, quick: bool) -> dict:
    """Evaluate the spec on the stimuli into ``store`` and return the shape-bias table with the own set beside."""
    import yaml

    import shiftbench as sb

    spec = yaml.safe_load(SPEC.read_text())
    if quick:
        spec.update(dataset=str(QUICK_STIMULI), models=spec["models"][:1], name=f"{spec['name']}-quick")
    elif stimuli is not None:
        spec["dataset"] = str(stimuli)
    if not Path(spec["dataset"]).is_dir():
        sys.exit(f"{spec['dataset']}: no such folder; give the cue-conflict stimuli with --stimuli (the folder "
                 "stimuli/style-transfer-preprocessed-512 of github.com/rgeirhos/texture-vs-shape)")
    rows = sb.evaluate(spec, store=store, progress=True)
    result = _shape_bias_table()(str(store), rows[0]["run_id"])
    own = json.loads(OWN_SET.read_text()) if OWN_SET.is_file() else {"models": []}
    for entry in result["models"]:
        mine = next((m for m in own["models"] if m["model"] == entry["model"]), None)
        entry["own_set"] = mine and {"shape_bias": mine["shape_bias"], "decisions": mine["decisions"],
                                     "dataset": own.get("dataset"), "run": own.get("run")}
    result.update(stimuli=spec["dataset"], aggregation=(spec.get("dataset_params") or {}).get("aggregation", "mean"),
                  quick=quick)
    return result


def _pct(cell: dict | None) -> str:
    if not cell or cell.get("value") is None:
        return "–"
    text = f"{100 * cell['value']:.1f}"
    if cell.get("low") is not None:
        text += f" [{100 * cell['low']:.1f}, {100 * cell['high']:.1f}]"
    return text


def print_table(result: dict) -> None:
    m0 = result["models"][0]
    n = m0.get("shape_bias", {}).get("n")
    print(f"{result['stimuli']}, run {result['run']}: decisions among {result['classes']} categories "
          f"({result['aggregation']} of the probabilities), chance {100 * result['chance']:.2f}%; % with 95% "
          "bootstrap CI over images\n")
    print(f"| model | shape bias, stimuli (n = {n}) | cue decided (n = {n}) | shape / texture decisions | "
          "shape bias, objects-cue-conflict (n = 752) |")
    print("|---|---|---|---|---|")
    for m in result["models"]:
        d, own = m["decisions"], m.get("own_set") or {}
        print(f"| {m['model']} | {_pct(m.get('shape_bias'))} | {_pct(m.get('cue_decided'))} | "
              f"{d['shape_decisions']} / {d['texture_decisions']} of {d['conflict_images']} | "
              f"{_pct(own.get('shape_bias'))} |")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stimuli", type=Path, default=None, help="the cue-conflict folder (default: the spec's dataset)")
    ap.add_argument("--store", type=Path, default=Path("stimuli.db"), help="results database (resumed when it holds the run)")
    ap.add_argument("--quick", action="store_true", help="the 32 shipped test stimuli, efficientnet_lite0 only")
    ap.add_argument("--json", type=Path, default=None, help="also write the table as JSON (with --quick: not under "
                                                            "benchmarks/results/)")
    args = ap.parse_args(argv)
    if args.quick and args.json is not None and args.json.resolve().is_relative_to(RESULTS.resolve()):
        ap.error("--quick never writes the committed results file; give another --json or none")
    result = run(args.stimuli, args.store, args.quick)
    print_table(result)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
