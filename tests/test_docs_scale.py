"""docs/scale.md stays true: its commands use only options the CLI has, its measured figures are the benchmark's."""

from __future__ import annotations

import json
import re
from pathlib import Path

from shiftbench.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "scale.md"


def doc_commands(text: str) -> list[tuple[str, list[str]]]:
    """(subcommand, --options) of every `shiftbench SUB ...` line of the doc's code blocks, continuations joined."""
    blocks = re.findall(r"```(?:bash)?\n(.*?)```", text, flags=re.S)
    out = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("shiftbench "):
                words = line.split()
                out.append((words[1], [w.split("=")[0] for w in words[2:] if w.startswith("--")]))
    return out


def test_every_documented_command_option_exists() -> None:
    commands = doc_commands(DOC.read_text())
    assert len(commands) >= 3  # the two Generate-on-Ray examples and the cluster walk-through
    for sub, options in commands:
        assert sub in cli.commands, sub
        known = {o for p in cli.commands[sub].params for o in p.opts}
        unknown = [o for o in options if o not in known]
        assert not unknown, f"docs/scale.md: shiftbench {sub} has no {unknown}"


def test_doc_commands_parser_sees_unknown_options() -> None:
    # the check above would pass vacuously if the parser dropped options: it must see them, joined lines too
    text = "```bash\nshiftbench generate --out x \\\n    --engine ray --no-such-flag=1\n```\n"
    assert doc_commands(text) == [("generate", ["--out", "--engine", "--no-such-flag"])]


def test_cost_plan_figures_are_the_measured_ones() -> None:
    """The cost-plan table quotes benchmarks/results/cost_plan.json (rounded as printed): rerunning the
    benchmark without updating the doc, or editing a figure by hand, fails here."""
    text = DOC.read_text()
    r = json.loads((ROOT / "benchmarks" / "results" / "cost_plan.json").read_text())
    quoted = {
        f"{r['corruptions']['sum_shift_ms']:.1f} ms": "corruption sum",
        f"{r['corruptions']['mean_png_ms']:.1f} ms": "PNG encode 224",
        f"{r['corruptions']['mean_png_kb']:.1f} kB": "PNG size 224",
        f"{r['vit']['ms_per_image']:.0f} ms/image": "ViT-B forward",
        f"{r['unet']['s_per_pass_512']:.1f} s": "UNet pass",
        f"{r['vae']['s_per_decode']:.1f} s": "VAE decode",
        f"{r['composite']['dilate_ms']:.2f} ms": "dilation",
        f"{r['composite']['blend_ms']:.1f} ms": "compositing",
        f"{r['composite']['png_kb']:.0f} kB": "PNG size 512",
    }
    missing = [f"{what} ({figure})" for figure, what in quoted.items() if figure not in text]
    assert not missing, f"docs/scale.md does not quote the measured {missing}"
    assert r["unet"]["latent"] == 64 and 860 < r["unet"]["params_m"] < 870  # SD2's UNet, at full size


def _scale_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "benchmarks" / "scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_evaluate_benchmark_is_the_demo_classification_part() -> None:
    """benchmarks/scale.py measures what the doc says: demo.yaml as it is (its models, 64 images, clean +
    75 ImageNet-C conditions) + the 12 compose background conditions = 88, and the quick run is a strict subset."""
    import yaml

    bench = _scale_module()
    demo = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    full, quick = bench.demo_classification_spec(False), bench.demo_classification_spec(True)
    assert bench.n_conditions(full) == 88 and bench.n_conditions(quick) == 4
    assert {**full, "shifts": full["shifts"][:len(demo["shifts"])]} == demo
    assert full["shifts"][len(demo["shifts"]):] == bench.BACKGROUNDS and len(bench.BACKGROUNDS) == 12
    assert all(s == "clean" or s["name"] in {d["name"] for d in demo["shifts"] if isinstance(d, dict)}
               for s in quick["shifts"])


def test_evaluate_figures_are_the_measured_ones() -> None:
    """The "Evaluate on Ray" figures quote benchmarks/results/scale.json (rounded as printed)."""
    text = DOC.read_text()
    r = json.loads((ROOT / "benchmarks" / "results" / "scale.json").read_text())
    ev, mem = r["evaluate"], r["memory"]
    assert ev["rows_identical"] and ev["predictions_identical"] and ev["images"] == 3 * ev["conditions"] * 64
    runs = {(run["engine"], run["samples"]): run for run in mem["runs"]}
    quoted = {
        f"| {ev['local_s']:.1f} | {ev['ray_s']:.1f} | {ev['local_per_s']:.1f} | {ev['ray_per_s']:.1f} | "
        f"{ev['ratio']:.2f} |": "evaluate timings",
        **{f"| {engine} | {n:,} | {run['peak_rss_mb']:.1f} |": f"{engine} peak at {n}"
           for (engine, n), run in runs.items()},
    }
    missing = [f"{what} ({figure})" for figure, what in quoted.items() if figure not in text]
    assert not missing, f"docs/scale.md does not quote the measured {missing}"
    assert {n for _, n in runs} == {1000, 20000} and {e for e, _ in runs} == {"local", "ray"}


def test_memory_child_runs_the_local_engine_at_a_tiny_size(tmp_path, capsys) -> None:
    """The memory benchmark's child process works end to end (a small folder, the local engine)."""
    bench = _scale_module()
    folder = bench.small_photo_folder(tmp_path / "photos", 24, size=32)
    bench.memory_child(str(folder), 24, "local", 2, False)
    out = json.loads(capsys.readouterr().out.split("RESULT ", 1)[1])
    assert out["engine"] == "local" and out["samples"] == 24 and out["rows"] == 4 and out["peak_rss_mb"] > 0


def test_results_at_scale_tables_are_the_measured_ones() -> None:
    """The "Results at scale" tables quote benchmarks/results/results_scale.json as the benchmark printed them
    (before the rework, after it, and at the issue's full size)."""
    text = DOC.read_text()
    r = json.loads((ROOT / "benchmarks" / "results" / "results_scale.json").read_text())
    for label in ("before", "after", "full"):
        assert label in r, f"results_scale.json has no {label!r} run"
        missing = [line for line in r[label]["table"] if line not in text]
        assert not missing, f"docs/scale.md does not quote the {label} run's lines {missing[:3]}"
