"""Every benchmark with a ``--quick`` smoke mode refuses to write the committed results under
benchmarks/results/: ``--quick --json benchmarks/results/<its file>`` exits with status 2 right after
argument parsing (no work done) and leaves every committed results file byte for byte as it was.
Scripts are discovered by their source, so a new benchmark with ``--quick`` is covered automatically."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
REFUSAL = "--quick never writes the committed results file"
QUICK_SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if "--quick" in p.read_text(encoding="utf-8"))


def snapshot() -> dict[str, str]:
    """sha256 of every file under benchmarks/results/, by its path there."""
    return {p.relative_to(RESULTS).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(RESULTS.rglob("*")) if p.is_file()}


def test_the_known_quick_benchmarks_are_discovered() -> None:
    names = {p.stem for p in QUICK_SCRIPTS}
    assert {"train_augment_example", "cost_plan", "scale", "imagenet_c_preset"} <= names, names


@pytest.mark.parametrize("spelling", ["relative", "absolute-indirect"])
@pytest.mark.parametrize("script", QUICK_SCRIPTS, ids=lambda p: p.stem)
def test_quick_refuses_the_committed_results_file(script: Path, spelling: str) -> None:
    # its own results file (whether or not it exists yet: a name under benchmarks/results is what counts),
    # spelled plainly or as an absolute path through ".." (the scripts compare resolved paths)
    target = (f"benchmarks/results/{script.stem}.json" if spelling == "relative"
              else str(RESULTS / ".." / "results" / f"{script.stem}.json"))
    before = snapshot()
    proc = subprocess.run([sys.executable, str(script), "--quick", "--json", target], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert REFUSAL in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout == "", f"{script.name} did work before refusing:\n{proc.stdout[-2000:]}"
    assert snapshot() == before
