"""Group names in specs and in generate --shift: ``common`` selects ImageNet-C's 15, ``cbar`` C-bar's ten."""

from __future__ import annotations

import pytest

from shiftbench.cli import main
from shiftbench.engine.generate import resolve_shifts
from shiftbench.errors import SpecError
from shiftbench.registry import SHIFTS
from shiftbench.shifts.cbar import CBAR_CORRUPTIONS
from shiftbench.shifts.corruptions import CORRUPTION_GROUPS
from shiftbench.shifts.groups import group_members
from shiftbench.spec import load_spec

BASE = {"dataset": "objects", "models": ["dummy_classifier"], "metrics": ["top1"]}


@pytest.mark.parametrize("group", ["common", "noise", "all", "cbar"])
def test_a_group_in_a_spec_is_the_spec_that_lists_its_shifts(group):
    members = group_members(group)
    named = load_spec({**BASE, "shifts": ["clean", {"name": group, "severities": [2, 4]}]})
    listed = load_spec({**BASE, "shifts": ["clean", *({"name": m, "severities": [2, 4]} for m in members)]})
    assert named.conditions() == listed.conditions()
    assert named.raw == listed.raw  # the run's identity: one run, written either way
    assert [s.name for s in named.shifts[1:]] == members == resolve_shifts([group])


def test_cbar_is_the_ten_of_the_published_table_and_common_the_fifteen():
    assert group_members("cbar") == list(CBAR_CORRUPTIONS)
    assert len(CBAR_CORRUPTIONS) == 10
    assert group_members("common") == CORRUPTION_GROUPS["common"] and len(CORRUPTION_GROUPS["common"]) == 15
    assert len(CORRUPTION_GROUPS["all"]) == 19  # ImageNet-C's: C-bar is a group of its own
    assert all(SHIFTS.entry(n).meta["group"] == "cbar" for n in CBAR_CORRUPTIONS)
    assert group_members("gaussian_noise") is None and group_members("no_such_group") is None


def test_a_group_with_params_and_a_group_repeating_a_shift_are_refused():
    with pytest.raises(SpecError, match=r"shifts\[0\]\.params: 'cbar' is a group of 10 shifts"):
        load_spec({**BASE, "shifts": [{"name": "cbar", "params": {"seed": 1}}]})
    with pytest.raises(SpecError, match=r"shifts\[1\]: repeats shifts\[0\] \('sparkles', severity 3\)"):
        load_spec({**BASE, "shifts": [{"name": "cbar", "severities": [3]}, {"name": "sparkles", "severity": 3}]})


def test_list_shifts_shows_each_cbar_corruption_with_its_group(capsys):
    assert main(["list", "shifts", "*"]) == 0
    out = capsys.readouterr().out
    for name in CBAR_CORRUPTIONS:
        line = next(l for l in out.splitlines() if l.startswith(f"{name}:"))
        assert "cbar" in line, line


def test_generate_and_evaluate_cbar_through_the_cli_store_and_report(tmp_path, capsys):
    """The user's path: `generate --shift cbar` writes the ten, a spec naming `cbar` runs them into a store,
    and the report's headline gives C-bar its own column."""
    import json

    from e2e import report_tables

    out = tmp_path / "cbar"
    assert main(["generate", "--dataset", "objects", "--shift", "cbar", "--severity", "5", "--limit", "1",
                 "--out", str(out)]) == 0
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert sorted(r["shift"] for r in records) == sorted(CBAR_CORRUPTIONS)
    assert all((out / name / "5").is_dir() for name in CBAR_CORRUPTIONS)

    spec = tmp_path / "spec.yaml"
    spec.write_text("dataset: objects\nmodels: [dummy_classifier]\nshifts: [clean, {name: cbar, severities: [5]}]\n"
                    "metrics: [top1]\nlimit: 2\n")
    assert main(["evaluate", "--config", str(spec), "--store", str(tmp_path / "r.db")]) == 0
    _, _, html = report_tables(tmp_path / "r.db", tmp_path / "report")
    assert "ImageNet-C-bar" in html and "mean of 10 C-bar corruptions" in html
    capsys.readouterr()
