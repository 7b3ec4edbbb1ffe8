"""The `shiftbench` command: list, env, dry-run, one-line errors without tracebacks, light imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SRC = HERE.parent / "src"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(SRC), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "200"
    code = "import sys, tiny_registry; from shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120)


def test_list_and_patterns():
    out = run("list", "shifts")
    assert out.returncode == 0 and "clean" in out.stdout and "_test_noise" in out.stdout
    names = run("list", "shifts", "*noise*", "--names").stdout.split()
    assert "_test_noise" in names and "clean" not in names
    assert run("list", "datasets", "--names").stdout.split().count("_test_tiny") == 1


def test_list_pattern_matching_nothing_is_one_error_line():
    out = run("list", "shifts", "nonexistent")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == ["error: no shifts match 'nonexistent'"]
    close = run("list", "shifts", "gausian_noise", "--names")
    assert close.returncode == 2 and "did you mean 'gaussian_noise'" in close.stderr and "Traceback" not in close.stderr
    everywhere = run("list", "all", "zzqqxx")
    assert everywhere.returncode == 2 and everywhere.stderr.count("\n") == 1
    # `list all PATTERN` shows only the kinds the pattern matches
    blur = run("list", "all", "*blur*")
    assert blur.returncode == 0 and "shifts (" in blur.stdout and "metrics (" not in blur.stdout


def test_list_metrics_descriptions_are_clean_first_sentences():
    from shiftbench.registry import METRICS, summary_line

    out = run("list", "metrics")
    assert out.returncode == 0
    for entry in METRICS.entries():
        line = entry.description
        assert line and "``" not in line and ":class:" not in line and "\n" not in line, (entry.name, line)
        assert line == summary_line(line)  # already one sentence: nothing cut mid-sentence
    fg = METRICS.entry("foreground_iou").description
    assert fg.endswith("(all pixels together).") and "``" not in out.stdout and ":class:`" not in out.stdout
    assert summary_line("Mean over ``x`` via :func:`~a.b.c`, see *this*\n    and more. Second.") == "Mean over x via c, see this and more."


def test_env_json():
    out = run("env", "--json")
    assert out.returncode == 0
    info = json.loads(out.stdout)
    assert info["python"].startswith("3.") and "numpy" in info["packages"] and "cpu" in info["devices"]


def test_dry_run_prints_plan(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("dataset: _test_tiny\nmodels: [{name: dummy_classifier, params: {label_space: 2}}]\n"
                    "shifts: [{name: _test_noise, severities: 1-5}]\nmetrics: [top1]\n")
    code = "import sys, tiny_registry\nfrom shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(SRC)]), COLUMNS="200")
    out = subprocess.run([sys.executable, "-c", code, "evaluate", "--config", str(spec), "--dry-run"],
                         capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "planned conditions (6)" in out.stdout and "_test_noise" in out.stdout
    assert "20 samples" in out.stdout and "dummy_classifier" in out.stdout
    assert not (tmp_path / "s.db").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    "args, message",
    [
        (["evaluate", "--config", "/no/such.yaml", "--dry-run"], "spec file not found"),
        (["generate", "--dataset", "_test_tiny", "--shift", "_test_nois", "--out", "x"], "did you mean '_test_noise'"),
        (["generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--severity", "9", "--out", "x"],
         "severity 9 is outside 1..5"),
        (["report", "--store", "{bad}", "--out", "o"], "not an SQLite database"),
    ],
)
def test_user_mistakes_are_one_line(tmp_path, args, message):
    args = [a.replace("{bad}", str(tmp_path / "bad.db")) for a in args]
    (tmp_path / "bad.db").write_text("not a database")
    out = run(*args, cwd=tmp_path)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], out.stderr


def test_malformed_yaml_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: [unclosed\n")
    out = run("evaluate", "--config", str(bad), "--dry-run")
    assert out.returncode == 2 and "malformed YAML" in out.stderr and "Traceback" not in out.stderr


def test_generate_from_cli(tmp_path):
    out = run("generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--severity", "1-2",
              "--out", str(tmp_path / "g"), "--limit", "3", "--workers", "2")
    assert out.returncode == 0, out.stderr
    assert len((tmp_path / "g" / "manifest.jsonl").read_text().splitlines()) == 6


def test_import_and_list_do_not_import_torch():
    code = ("import sys; from shiftbench.cli import main\n"
            "rc = main(['list', 'shifts', '--names'])\n"
            "print('HEAVY', [m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(SRC)), timeout=120)
    assert "HEAVY []" in out.stdout
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "diffusers" not in imported


# -- evaluate ends with what it found (issue 27, item 3) ---------------------------------------------
SMALL = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
         "shifts": ["clean", {"name": "_test_noise", "severities": [1, 2]}], "batch_size": 4}


def _evaluate(tmp_path, capsys, spec: dict, *extra: str) -> tuple[int, str]:
    import tiny_registry  # noqa: F401  (_test_tiny, _test_noise)
    from shiftbench.cli import main

    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec))
    code = main(["evaluate", "--config", str(path), "--store", str(tmp_path / "r.db"), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return code, captured.out


def test_evaluate_ends_with_the_headline_the_engine_the_resumed_work_and_the_next_commands(tmp_path, capsys):
    from shiftbench.report import run_headline
    from shiftbench.results.store import Store

    _, out = _evaluate(tmp_path, capsys, {**SMALL, "metrics": ["top1"]})
    with Store(tmp_path / "r.db") as store:
        run = store.run()["run_id"]
        rows = store.rows(run)
    lines = out.splitlines()
    assert lines[0] == "engine: local (this process)"
    assert not any(line.startswith("resumed:") for line in lines)  # a fresh run
    # the headline table: the report's own cells (report.run_headline), the clean top-1 of the rows
    head = run_headline(tmp_path / "r.db", run)
    assert f"headline of run {run}: top1" in out and "top1 (%)" in out and "dummy_classifier" in out
    clean = next(r["value"] for r in rows if r["shift"] == "clean")
    assert head.rows[0].cells[0].text == f"{100 * clean:.1f}"
    for cell in head.rows[0].cells:
        assert cell.text in out and (not cell.ci or cell.ci in out)
    assert f"3 result rows of run {run} in {tmp_path / 'r.db'}" in out
    assert f"next: shiftbench report --store {tmp_path / 'r.db'} --out r-report" in out
    # a second call resumes everything and says so
    _, again = _evaluate(tmp_path, capsys, {**SMALL, "metrics": ["top1"]})
    assert "resumed: 3 of 3 conditions already done (nothing left to compute)" in again.splitlines()
    assert again.count("dummy_classifier") == out.count("dummy_classifier")


def test_evaluate_says_how_much_a_killed_run_had_done(tmp_path, capsys):
    import shiftbench as sb
    import tiny_registry  # noqa: F401

    spec = {**SMALL, "metrics": ["top1"]}
    calls = []

    def stop(model, batch):  # 5 batches per condition: the 7th save is inside the second condition
        calls.append(batch)
        if len(calls) == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sb.evaluate(spec, store=tmp_path / "r.db", on_batch=stop)
    _, out = _evaluate(tmp_path, capsys, spec)
    assert "resumed: 1 of 3 conditions already done (the rest computed now)" in out.splitlines()


def test_the_engine_line_names_ray_with_its_cluster_or_its_cpus():
    from shiftbench.cli import _engine_line
    from shiftbench.engine.spec import EngineSection

    assert _engine_line(EngineSection()) == "engine: local (this process)"
    assert _engine_line(EngineSection(pixels="cpu")) == "engine: local (this process; pixels: cpu)"
    assert _engine_line(EngineSection("ray", address="10.0.0.1:6379", shard_size=128)) == \
        "engine: ray (the cluster at 10.0.0.1:6379; units of 128 samples)"
    assert _engine_line(EngineSection("ray", workers=4)) == "engine: ray (a local Ray cluster on 4 CPUs; units of 256 samples)"
    assert _engine_line(EngineSection("ray", address="auto")).startswith("engine: ray (the running cluster Ray found")


def test_a_spec_without_metrics_runs_each_tasks_defaults_as_if_it_listed_them(tmp_path, capsys):
    from shiftbench.results.store import Store

    _, plan = _evaluate(tmp_path, capsys, SMALL, "--dry-run")
    assert "metrics: top1, ece (the task default: the spec lists none)" in plan
    _, out = _evaluate(tmp_path, capsys, SMALL)  # no metrics: the classifier's top1 and ece
    with Store(tmp_path / "r.db") as store:
        run = store.run()
        assert run["spec"]["metrics"] == ["top1", "ece"]
        assert {r["metric"] for r in store.rows(run["run_id"])} == {"top1", "ece"}
    assert "6 result rows" in out
    # the defaults are the run's identity: the spec that lists them is the same run, resumed
    _, listed = _evaluate(tmp_path, capsys, {**SMALL, "metrics": ["top1", "ece"]})
    assert "resumed: 3 of 3 conditions already done" in listed and f"of run {run['run_id']}" in listed
    # a spec that lists other metrics keeps its own identity
    _, other = _evaluate(tmp_path, capsys, {**SMALL, "metrics": ["top1"]})
    assert "resumed:" not in other


def test_default_metrics_per_task_and_a_mix_of_tasks_is_refused():
    import tiny_registry  # noqa: F401
    from shiftbench.engine.evaluate import prepare
    from shiftbench.errors import SpecError

    objects = {"dataset": "objects", "dataset_params": {"size": 64}, "limit": 2, "shifts": ["clean"]}
    expected = {"dummy_classifier": ["top1", "ece"], "dummy_segmenter": ["foreground_iou"], "dummy_detector": ["box_ap"],
                "dummy_captioner": ["text_similarity"]}
    for model, metrics in expected.items():
        plan = prepare({**objects, "models": [model]})
        assert plan.spec.metrics == metrics and plan.spec.raw["metrics"] == metrics, model
        assert plan.metrics == {model: metrics}
    with pytest.raises(SpecError, match=r"metrics: left out, and the models' tasks have different defaults "
                                        r"\(dummy_classifier: top1, ece; dummy_detector: box_ap\)"):
        prepare({**objects, "models": ["dummy_classifier", "dummy_detector"]})
    with pytest.raises(SpecError, match="metrics: empty; list metric names, or leave metrics out"):
        prepare({**objects, "models": ["dummy_classifier"], "metrics": []})


# -- errors name the settings as the user gives them (issue 27, item 6) ------------------------------
def test_a_bad_image_names_the_cli_flag_on_the_command_line_and_the_keyword_in_python(tmp_path, capsys):
    import shiftbench as sb
    from shiftbench.cli import main
    from shiftbench.datasets.common import BadImagesError

    for c in ("cat", "dog"):
        (tmp_path / "data" / c).mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "data" / "cat" / "a.png")
    (tmp_path / "data" / "dog" / "broken.png").write_bytes(b"not an image")
    spec = tmp_path / "s.yaml"
    spec.write_text(f"dataset: {tmp_path / 'data'}\nmodels: [{{name: dummy_classifier, params: {{label_space: [cat, dog]}}}}]\n"
                    "shifts: [clean]\n")
    assert main(["evaluate", "--config", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "(pass --on-error skip to leave them out and report them)" in err and "on_error=" not in err
    with pytest.raises(BadImagesError) as caught:
        sb.load_dataset(str(tmp_path / "data"))
    assert str(caught.value).endswith("(pass on_error='skip' to leave them out and report them)")
    assert "--on-error" not in str(caught.value)
