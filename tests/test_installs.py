"""The install the README shows and its "own data" example: extras that exist, torch as a range, and
the example spec run as written (dry run, real run, report) on a small ImageNet wnid folder."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import numpy as np
import pytest
import yaml

from shiftbench.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _normalise(extra: str) -> str:
    return re.sub(r"[-_.]+", "-", extra).lower()  # PEP 685: pip compares extras normalised


def _named_extras(text: str) -> set[str]:
    """Extras a message or page tells the user to install: shiftbench[a,b] and ".[a,b]"."""
    found = set()
    for group in re.findall(r"shiftbench\[([\w,\- ]+)\]", text) + re.findall(r"\"\.\[([\w,\- ]+)\]\"", text):
        found |= {_normalise(x.strip()) for x in group.split(",")}
    return found


def test_every_extra_named_in_messages_and_docs_exists():
    declared = {_normalise(x) for x in PYPROJECT["project"]["optional-dependencies"]}
    texts = {p: p.read_text() for p in [*(ROOT / "src").rglob("*.py"), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md",
                                         ROOT / "scripts" / "test"]}
    named = {p.relative_to(ROOT).as_posix(): _named_extras(t) for p, t in texts.items()}
    missing = {path: sorted(extras - declared) for path, extras in named.items() if extras - declared}
    assert not missing, f"extras named but not declared in pyproject: {missing}"
    # the ones users are sent to by the backends' error messages
    assert {"gen", "torch", "timm", "open-clip"} <= set().union(*named.values())


def extras_of(name: str) -> str:
    return " ".join(PYPROJECT["project"]["optional-dependencies"][name])


def test_torch_is_a_range_and_the_pin_lives_in_the_constraints():
    deps = [d for extra in PYPROJECT["project"]["optional-dependencies"].values() for d in extra]
    torch_reqs = [d for d in deps if re.match(r"torch\b(?!vision)", d)]
    assert torch_reqs and all("==" not in d and ">=" in d for d in torch_reqs), torch_reqs
    constraints = (ROOT / "constraints-cpu.txt").read_text()
    assert re.search(r"^torch==\d+\.\d+\.\d+$", constraints, re.M)
    # every pip command of the README's code blocks and of scripts/test that installs torch or the torch
    # extra takes the pin from the constraints file
    readme_code = "\n".join(re.findall(r"```bash\n(.*?)```", README, re.S))
    for text in (readme_code, (ROOT / "scripts" / "test").read_text()):
        commands = [c for line in text.splitlines() if not line.lstrip().startswith("#")
                    for c in line.split("&&") if "pip" in c and " install" in c]
        torch_installs = [c for c in commands if re.search(r"\btorch\b", c)]
        assert torch_installs, text
        assert all(re.search(r"-c constraints-(cpu|test)\.txt", c) and "torch==" not in c for c in torch_installs), \
            torch_installs
    # the suite's environment pins the torch build that has a torchvision, and that torchvision, so that timm,
    # open_clip and torchvision run for real; scripts/test installs from those pins
    test_pins = (ROOT / "constraints-test.txt").read_text()
    assert re.search(r"^torch==\d+\.\d+\.\d+$", test_pins, re.M) and re.search(r"^torchvision==\d+\.\d+\.\d+$", test_pins, re.M)
    assert "-c constraints-test.txt" in (ROOT / "scripts" / "test").read_text()
    assert "torchvision" in extras_of("torchvision")
    # rembg's wheel is no longer needed: its pins clash, and u2netp.onnx is package data now
    assert "rembg" not in (ROOT / "scripts" / "test").read_text()
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert any(d.startswith("timm") for d in extras["timm"]) and any(d.startswith("open_clip_torch") for d in extras["open_clip"])


def _readme_block(lang: str, marker: str) -> str:
    blocks = re.findall(rf"```{lang}\n(.*?)```", README, re.S)
    chosen = [b for b in blocks if marker in b]
    assert len(chosen) == 1, f"README: expected one {lang} block with {marker!r}, found {len(chosen)}"
    return chosen[0]


def _wnid_folder(root: Path) -> Path:
    """Three real photos in ImageNet wnid folders (Egyptian cat, espresso, space shuttle)."""
    import cv2
    from skimage import data

    photos = {"n02124075": data.chelsea(), "n07920052": data.coffee(), "n04266014": data.rocket()}
    for wnid, image in photos.items():
        (root / wnid).mkdir(parents=True)
        small = cv2.resize(image, (image.shape[1] // 2, image.shape[0] // 2), interpolation=cv2.INTER_AREA)
        assert cv2.imwrite(str(root / wnid / f"{wnid}_0.JPEG"), small[:, :, ::-1])
    return root


@pytest.mark.slow
def test_readme_own_data_example_runs_as_written(tmp_path, monkeypatch, capsys):
    spec_text = _readme_block("yaml", "# my_spec.yaml")
    spec = yaml.safe_load(spec_text)
    assert spec["dataset"] == "my_photos"
    # only the dataset changes (other real photos: tests/docs/test_docs_run.py runs it on tools/example_folder.py's):
    # every model, shift and metric is run as the README writes it
    data = _wnid_folder(tmp_path / "imagenet-val-subset")
    (tmp_path / "my_spec.yaml").write_text(spec_text.replace("dataset: my_photos ", f"dataset: {data} "))
    # the hub alternatives are shown, commented out, with the extra each one needs
    assert re.search(r"#\s*- timm:\S+.*\.\[timm\]", spec_text) and re.search(r"#\s*- \{name: open_clip:.*\.\[open_clip\]", spec_text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHIFTBENCH_U2NETP", raising=False)  # masks from the shipped u2netp.onnx

    commands = [shlex.split(line.partition("  #")[0]) for line in _readme_block("bash", "my_spec.yaml").splitlines()
                if line.startswith("shiftbench evaluate") or line.startswith("shiftbench report")]
    assert [c[:2] for c in commands] == [["shiftbench", "evaluate"], ["shiftbench", "evaluate"], ["shiftbench", "report"]]
    assert "--dry-run" in commands[0]
    for command in commands:
        assert main(command[1:]) == 0, command
    out = capsys.readouterr().out
    assert "background_color" in out  # the dry run planned every condition

    rows = json.loads((tmp_path / "rows.json").read_text())
    models = [m if isinstance(m, str) else m["name"] for m in spec["models"]]
    conditions = {(r["shift"], r["severity"]) for r in rows}
    assert conditions == {("clean", 0), ("background_color", 5)} | {("gaussian_noise", s) for s in range(1, 6)}
    assert {r["model"] for r in rows} == set(models) and {r["metric"] for r in rows} == set(spec["metrics"])
    assert all(r["n"] == 3 and np.isfinite(r["value"]) for r in rows)
    # the wnid folders were mapped to ImageNet's indices: the bundled models know these photos
    top5 = {r["model"]: r["value"] for r in rows if r["shift"] == "clean" and r["metric"] == "top5"}
    assert all(v >= 2 / 3 for v in top5.values()), top5
    html = (tmp_path / "my-report" / "report.html").read_text()
    assert "background_color" in html and "gaussian_noise" in html
