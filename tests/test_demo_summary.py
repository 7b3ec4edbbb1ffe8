"""The demo's console summary: families grouped by what they are (natural scenes, synthetic colour and texture
backgrounds, never colour or texture as natural); controls and the attack apart."""

from __future__ import annotations

import io

from rich.console import Console

from shiftbench.demo.run import _print_classification
from shiftbench.results.records import Row


def _row(model, shift, value, params=None, severity=5):
    return Row(model, "d", shift, params or {}, severity, metric="top1", value=value, n=64)


def test_controls_and_attack_are_not_averaged_into_the_backgrounds():
    rows = []
    for model, attacked in (("a", 0.0), ("b", 0.5)):
        rows += [_row(model, "clean", 0.8, severity=0), _row(model, "gaussian_noise", 0.4, severity=3),
                 _row(model, "background_color", 0.6, {"color": "red"}),
                 _row(model, "background_texture", 0.7, {"texture": 1}),
                 _row(model, "object_only", 0.9), _row(model, "background_only", 0.0),
                 _row(model, "adversarial_texture", attacked, {"model": "a", "early_stop": True})]
    buf = io.StringIO()
    console = Console(file=buf, width=250, color_system=None)
    _print_classification(console, rows)  # the attacked model is the one in the rows' params
    text = buf.getvalue()
    line_a = next(line for line in text.splitlines() if line.startswith("│ a "))
    cells = [c.strip() for c in line_a.strip("│ ").split("│")]
    header = next(line for line in text.splitlines() if "clean" in line and line.startswith("┃"))
    heads = [c.strip() for c in header.strip("┃ ").split("┃")]
    # colour and texture are synthetic backgrounds, not natural scenes: no natural column at all here
    assert heads[:7] == ["model", "clean", "mean of 1 corruption", "colour, texture backgrounds (mean)",
                         "object only (control)", "background only (control)", "adversarial (attack)"]
    # clean, corruptions, colour and texture = mean(60, 70) = 65, object only, background only, attack
    assert cells[1:7] == ["80.0", "40.0", "65.0", "90.0", "0.0", "0.0 (attacked)"]
    line_b = next(line for line in text.splitlines() if line.startswith("│ b "))
    assert "50.0 (transfer)" in line_b
    assert "64 images per cell: one image is 1.6 points" in text
    assert "optimised against a" in text and "early_stop: true" in text


def test_mixed_same_mixed_rand_and_their_gap_have_columns():
    rows = []
    for model, same, rand in (("a", 0.75, 0.5), ("b", 0.6, 0.65)):
        rows += [_row(model, "clean", 0.9, severity=0),
                 _row(model, "background_scene", same, {"scene": "mixed_same"}),
                 _row(model, "background_scene", rand, {"scene": "mixed_rand"}),
                 _row(model, "background_color", 0.4, {"color": "red"})]
    buf = io.StringIO()
    _print_classification(Console(file=buf, width=250, color_system=None), rows, "curated")
    text = buf.getvalue()
    header = next(line for line in text.splitlines() if "Mixed-Same" in line)
    # the natural scenes are Mixed-Same and Mixed-Rand, each in its own column; the colour is a synthetic
    # background, in a column of its own
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == [
        "model", "clean", "Mixed-Same", "Mixed-Rand", "BG-Gap (points)", "colour, texture backgrounds (mean)"]
    cells = lambda m: [c.strip() for c in next(x for x in text.splitlines() if x.startswith(f"│ {m} ")).strip("│ ").split("│")]  # noqa: E731
    assert cells("a")[1:] == ["90.0", "75.0", "50.0", "+25.0", "40.0"]
    assert cells("b")[4] == "-5.0"
    assert "on objects: curated" in text


def test_natural_scenes_other_than_the_mixed_pair_get_their_mean():
    rows = []
    for model in ("a", "b"):
        rows += [_row(model, "clean", 0.9, severity=0), _row(model, "background_scene", 0.7, {"scene": "beach"}),
                 _row(model, "background_inpaint", 0.5, {"prompt": "class_label"}),
                 _row(model, "background_texture", 0.2, {"texture": 2})]
    buf = io.StringIO()
    _print_classification(Console(file=buf, width=250, color_system=None), rows)
    text = buf.getvalue()
    header = next(line for line in text.splitlines() if "clean" in line and line.startswith("┃"))
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == [
        "model", "clean", "natural scenes (mean)", "colour, texture backgrounds (mean)"]
    line_a = next(line for line in text.splitlines() if line.startswith("│ a "))
    assert [c.strip() for c in line_a.strip("│ ").split("│")][1:] == ["90.0", "60.0", "20.0"]
