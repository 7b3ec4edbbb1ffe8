"""The demo's console summary: natural background families averaged alone; controls and the attack apart."""

from __future__ import annotations

import io

from rich.console import Console

from shiftbench.engine.demo_run import _print_classification


def _row(model, shift, value, params=None, severity=5):
    return {"model": model, "shift": shift, "params": params or {}, "severity": severity, "metric": "top1",
            "value": value, "n": 64}


def test_controls_and_attack_are_not_averaged_into_natural_backgrounds():
    rows = []
    for model, attacked in (("a", 0.0), ("b", 0.5)):
        rows += [_row(model, "clean", 0.8, severity=0), _row(model, "gaussian_noise", 0.4, severity=3),
                 _row(model, "background_color", 0.6, {"color": "red"}),
                 _row(model, "background_texture", 0.7, {"texture": 1}),
                 _row(model, "object_only", 0.9), _row(model, "background_only", 0.0),
                 _row(model, "adversarial_texture", attacked, {"early_stop": True})]
    buf = io.StringIO()
    console = Console(file=buf, width=250, color_system=None)
    spec = {"shifts": [{"name": "adversarial_texture", "params": {"model": "a", "early_stop": True}}]}
    _print_classification(console, rows, spec)
    text = buf.getvalue()
    line_a = next(line for line in text.splitlines() if line.startswith("│ a "))
    cells = [c.strip() for c in line_a.strip("│ ").split("│")]
    # clean, corruptions, natural backgrounds = mean(60, 70) = 65, object only, background only, attack
    assert cells[1:7] == ["80.0", "40.0", "65.0", "90.0", "0.0", "0.0 (attacked)"]
    line_b = next(line for line in text.splitlines() if line.startswith("│ b "))
    assert "50.0 (transfer)" in line_b
    assert "64 images per cell: one image is 1.6 points" in text
    assert "optimised against a" in text and "early_stop: true" in text
