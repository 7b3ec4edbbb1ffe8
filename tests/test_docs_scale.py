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
