"""Install advice that works where the user stands (shiftbench/install.py): the checkout form from a checkout, the
package form from a package, in every "needs X" message; and the CLI naming its own flags in them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from shiftbench.errors import ShiftbenchError
from shiftbench.install import Installation, from_direct_url, install_command, installation

ROOT = Path(__file__).resolve().parents[1]


def test_this_checkout_is_found_and_gets_the_editable_command(monkeypatch, tmp_path):
    found = installation()
    assert found.checkout is not None and found.checkout.resolve() == ROOT.resolve() and found.editable
    monkeypatch.chdir(ROOT)
    assert install_command("ray") == 'pip install -c constraints-cpu.txt -e ".[ray]"'
    monkeypatch.chdir(tmp_path)  # elsewhere: the checkout's paths, so the command can be pasted there too
    assert install_command("gen") == f'pip install -c {ROOT.resolve() / "constraints-cpu.txt"} -e "{ROOT.resolve()}[gen]"'


def test_the_command_fits_each_kind_of_install(tmp_path):
    assert Installation(None, False).command("ray", tmp_path) == 'pip install "shiftbench[ray]"'
    project = tmp_path / "my checkout"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "shiftbench"\n')
    assert Installation(project, False).command("stream", project) == 'pip install ".[stream]"'  # no constraints file
    (project / "constraints-cpu.txt").write_text("torch==2.13.0\n")
    assert Installation(project, True).command("ray", project) == 'pip install -c constraints-cpu.txt -e ".[ray]"'
    assert Installation(project, False).command("ray", tmp_path) == \
        f"pip install -c '{project / 'constraints-cpu.txt'}' \"{project}[ray]\""
    # pip's record of the install (PEP 610 direct_url.json): a folder, editable or not; anything else is a package
    url = project.as_uri()
    assert from_direct_url(json.dumps({"url": url, "dir_info": {"editable": True}})) == Installation(project, True)
    assert from_direct_url(json.dumps({"url": url, "dir_info": {}})) == Installation(project, False)
    assert from_direct_url(json.dumps({"url": "https://example.org/shiftbench-0.1.0-py3-none-any.whl",
                                       "archive_info": {}})) == Installation(None, False)
    assert from_direct_url(json.dumps({"url": (tmp_path / "elsewhere").as_uri(), "dir_info": {}})) == Installation(None, False)
    assert from_direct_url(None) == from_direct_url("not json") == from_direct_url("[1]") == Installation(None, False)


def test_a_missing_ray_says_the_install_that_fits_and_the_cli_flag(monkeypatch, tmp_path, capsys):
    import tiny_registry  # noqa: F401
    from shiftbench.cli import main
    from shiftbench.engine.engines import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    monkeypatch.chdir(ROOT)
    with pytest.raises(ShiftbenchError) as caught:
        import_ray()
    assert str(caught.value) == ('the ray engine needs Ray: pip install -c constraints-cpu.txt -e ".[ray]" '
                                 "(or use engine='local')")
    spec = tmp_path / "s.yaml"
    spec.write_text("dataset: _test_tiny\nmodels: [{name: dummy_classifier, params: {label_space: 2}}]\nshifts: [clean]\n")
    assert main(["evaluate", "--config", str(spec), "--engine", "ray", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == ('error: the ray engine needs Ray: pip install -c constraints-cpu.txt '
                                               '-e ".[ray]" (or use --engine local)')


def test_no_message_or_page_sends_a_checkout_user_to_the_index_alone():
    """Every install line names both forms (or asks install.py): never the package form by itself."""
    import re

    offenders = []
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"pip install ['\"]?shiftbench\[", line) and path.name != "install.py" \
                    and not re.search(r"\.\[\w+\]", line + " " + _next_lines(path, n)):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, offenders


def _next_lines(path: Path, n: int) -> str:
    lines = path.read_text(encoding="utf-8").splitlines()
    return " ".join(lines[max(0, n - 3):n + 1])
