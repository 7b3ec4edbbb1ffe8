"""Seeds: one domain, 0 <= seed < 2**63, in the Python API, the spec, the CLI, the manifest and the store.

Over generated seeds: every entry point accepts the domain and records exactly the seed given (a real
tiny ``generate`` to its manifest and ``evaluate`` to the store); everything else (negative, 2**63 and
above, floats even when whole, strings, None, bool, numpy values out of range) is refused by every entry
point with a ShiftbenchError naming the seed, and by the CLI in one line with exit status 2; distinct
seeds give distinct streams. Plus the corpus's seed cases (tests/corpus/cases_seeds.py), run here.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import json
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import shiftbench as sb
import shiftbench.seeds as seeds_module
import tiny_registry  # noqa: F401  (registers _test_tiny and _test_noise)
from conftest import make_image, make_sample
from corpus.cases_seeds import CASES
from shiftbench.cli import main
from shiftbench.conditioning.attribute_text import rewrite_caption
from shiftbench.datasets import objects
from shiftbench.datasets.objects import ObjectsDataset
from shiftbench.datasets.objects_cir import ObjectsCIR
from shiftbench.engine.generate import CONFIG, generate
from shiftbench.errors import SeedError, ShiftbenchError, SpecError
from shiftbench.models.dummy import DummyClassifier
from shiftbench.models.retrieval_training import train_retrievers
from shiftbench.results.store import Store
from shiftbench.seeds import SEED_MAX, check_seed, parse_seed
from shiftbench.shifts.base import derive_seed, make_rng
from shiftbench.spec import load_spec
from shiftbench.training import ShiftPolicy, ShiftTransform

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# -- the two sides of the domain ------------------------------------------------------------------------
SEEDS = st.integers(0, SEED_MAX - 1)
IN_DOMAIN = st.one_of(
    SEEDS, st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**32, SEED_MAX - 1]),
    SEEDS.map(np.int64), SEEDS.map(np.uint64), st.integers(0, 2**31 - 1).map(np.int32),
)
OUT_INTS = st.one_of(
    st.integers(max_value=-1), st.integers(min_value=SEED_MAX),
    st.sampled_from([-1, -(2**63), SEED_MAX, 2**64 - 1, 2**64, 2**64 + 1, 2**70]),
    st.sampled_from([5000, -5000]).map(lambda k: 10**abs(k) * (1 if k > 0 else -1)),  # too long for repr()
)
OUT_OF_DOMAIN = st.one_of(
    OUT_INTS,
    st.integers(-(2**63), -1).map(np.int64), st.integers(SEED_MAX, 2**64 - 1).map(np.uint64),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(0, 2**53).map(float),  # 3.0 too
    st.text(max_size=12), SEEDS.map(str), st.none(), st.booleans(), st.just(np.bool_(True)),
    st.binary(max_size=4), st.fractions(), st.just(Fraction(3, 1)), st.lists(SEEDS, max_size=2),
    st.just(np.array([1])),
)
# what a YAML spec can hold besides valid seeds
OUT_OF_DOMAIN_YAML = st.one_of(OUT_INTS.filter(lambda v: abs(v) < 10**30), st.floats(), st.integers(0, 99).map(float),
                               st.text(max_size=12), st.none(), st.booleans(), st.lists(SEEDS, max_size=2))
# what a --seed option may be given that is not a seed in the domain
BAD_SEED_TEXT = st.one_of(
    OUT_INTS.filter(lambda v: abs(v) < 10**30).map(str), SEEDS.map(lambda v: f"{v}.0"), SEEDS.map(hex),
    st.text(max_size=12).filter(lambda t: not (t.strip().removeprefix("+").isascii()
                                               and t.strip().removeprefix("+").isdigit())),
    st.sampled_from(["", " ", "-0", "1e3", "1_000", "inf", "nan", "None", "true", "0x10", "--help", "٣"]),
)

# -- every Python entry point that takes a seed ------------------------------------------------------
IMAGE = make_image(32, 32)
SAMPLE = make_sample(32, 32)
NOISE = sb.create_shift("gaussian_noise")
BRIGHT = sb.create_shift("brightness")  # draws nothing: it never builds a generator
TEXT = sb.create_shift("text_swap")
CHAIN = sb.chain("brightness", "gaussian_noise")
POLICY = ShiftPolicy(["gaussian_noise"])
TINY_SPEC = {"dataset": "_test_tiny", "dataset_params": {"n": 4},
             "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
             "shifts": ["clean", {"name": "_test_noise", "severities": [1]}], "metrics": ["top1"], "batch_size": 4}
# (derive_seed, Shift.rng and Shift.draw_parsed are internal: they take a seed checked where it entered)
ENTRY_POINTS = {
    "shift(image)": lambda s: NOISE(IMAGE, severity=2, seed=s),
    "shift(image), no draws": lambda s: BRIGHT(IMAGE, severity=2, seed=s),
    "shift([image])": lambda s: NOISE([IMAGE], severity=2, seed=s),
    "shift.draw": lambda s: NOISE.draw(SAMPLE, 2, seed=s),
    "shift.draw, no draws": lambda s: BRIGHT.draw(SAMPLE, 2, seed=s),
    "text shift(str)": lambda s: TEXT("a cat sat on the mat", severity=2, seed=s),
    "text shift([''])": lambda s: TEXT([""], severity=2, seed=s),
    "text draw_text": lambda s: TEXT.draw_text("a cat", 2, seed=s),
    "chain": lambda s: CHAIN(IMAGE, severity=2, seed=s),
    "make_rng": lambda s: make_rng(s, "id", "name"),
    "spec": lambda s: load_spec({**TINY_SPEC, "seed": s}),
    "policy.choose": lambda s: POLICY.choose(0, 0, seed=s),
    "policy.sample": lambda s: POLICY.sample(SAMPLE, 0, 0, seed=s),
    "ShiftTransform": lambda s: ShiftTransform(POLICY, task="classification", seed=s),
    "dummy_classifier": lambda s: DummyClassifier(label_space=2, seed=s),
    "rewrite_caption": lambda s: rewrite_caption("a cat", "color", "pink", rewriter=lambda p, k: p, seed=s),
}
# these set up whole datasets or write files: refusals only (nothing is built before the check)
REFUSE_ONLY = {
    "ObjectsDataset": lambda s: ObjectsDataset(seed=s),
    "objects.render": lambda s: objects.render(objects.object_ids()[0], seed=s),
    "ObjectsCIR": lambda s: ObjectsCIR(seed=s),
    "ObjectsCIR split_seed": lambda s: ObjectsCIR(split_seed=s),
    "train_retrievers": lambda s: train_retrievers("not-a-checkpoint.bin", seed=s),
    "train_retrievers dataset_seed": lambda s: train_retrievers("not-a-checkpoint.bin", dataset_seed=s),
}


@contextlib.contextmanager
def scratch():
    """A fresh temporary folder per generated example (pytest's tmp_path is one per test)."""
    with tempfile.TemporaryDirectory(prefix="shiftbench-seeds-") as tmp:
        yield Path(tmp)


def run_cli(*argv: object) -> tuple[int, str]:
    """``shiftbench ARGV`` in this process: (exit status, stdout + stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue() + err.getvalue()


def assert_one_line_naming_seed(rc: int, output: str) -> None:
    assert rc == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "seed" in lines[0], output
    assert "Traceback" not in output


# -- the definition ----------------------------------------------------------------------------------
def test_module_doctest():
    assert doctest.testmod(seeds_module).failed == 0


@settings(max_examples=300, **SETTINGS)
@given(seed=IN_DOMAIN)
def test_the_domain_is_accepted_as_a_plain_int(seed):
    assert type(check_seed(seed)) is int and check_seed(seed) == int(seed)
    assert parse_seed(str(int(seed))) == int(seed) == parse_seed(f" +{int(seed)} ")


@settings(max_examples=400, **SETTINGS)
@given(value=OUT_OF_DOMAIN, where=st.sampled_from(["seed", "spec.yaml: seed", "--seed", "objects"]))
def test_everything_else_is_a_seed_error_in_one_line(value, where):
    with pytest.raises(SeedError) as info:
        check_seed(value, where)
    message = str(info.value)
    assert isinstance(info.value, ShiftbenchError) and isinstance(info.value, ValueError)
    assert message.startswith(where) and "seed" in message and "\n" not in message and len(message) < 200


@settings(max_examples=300, **SETTINGS)
@given(text=BAD_SEED_TEXT)
def test_option_text_outside_the_domain_is_refused_as_given(text):
    with pytest.raises(SeedError, match=r"^--seed: expected an integer 0 <= seed < 2\*\*63, got "):
        parse_seed(text)


# -- every entry point -------------------------------------------------------------------------------
@settings(max_examples=250, **SETTINGS)
@given(name=st.sampled_from(sorted(ENTRY_POINTS)), seed=IN_DOMAIN)
def test_every_entry_point_accepts_the_domain(name, seed):
    ENTRY_POINTS[name](seed)


@settings(max_examples=500, **SETTINGS)
@given(name=st.sampled_from(sorted({**ENTRY_POINTS, **REFUSE_ONLY})), value=OUT_OF_DOMAIN)
@example(name="shift(image)", value=2**64).via("seed 0's bytes before")
@example(name="spec", value=2**70).via("crashed in the store before")
@example(name="policy.choose", value=2**63).via("allowed up to 2**64 before")
def test_every_entry_point_refuses_the_rest_naming_the_seed(name, value):
    with pytest.raises(ShiftbenchError, match="seed") as info:
        {**ENTRY_POINTS, **REFUSE_ONLY}[name](value)
    assert "\n" not in str(info.value)
    if name == "spec":
        assert isinstance(info.value, SpecError) and str(info.value).startswith("seed: expected an integer")


@settings(max_examples=40, **SETTINGS)
@given(value=OUT_OF_DOMAIN)
def test_generate_and_the_store_refuse_before_writing(value):
    with scratch() as tmp:
        with pytest.raises(SeedError, match="seed"):
            generate("_test_tiny", ["_test_noise"], [1], tmp / "g", seed=value, dataset_kwargs={"n": 2})
        assert not (tmp / "g").exists()
        with Store(tmp / "r.db") as store:
            with pytest.raises(SeedError, match="seed"):
                store.start_run({"dataset": "d"}, seed=value)
            assert store.runs() == []


# -- the CLI: one line, exit 2 -------------------------------------------------------------------------
@settings(max_examples=60, **SETTINGS)
@given(text=BAD_SEED_TEXT, command=st.sampled_from(["generate", "train-retriever"]))
def test_cli_seed_options_refuse_in_one_line(text, command):
    with scratch() as tmp:
        if command == "generate":
            argv = ["generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--out", tmp / "g", "--seed", text]
        else:
            argv = ["train-retriever", "--out", tmp / "c.safetensors", "--seed", text]
        assert_one_line_naming_seed(*run_cli(*argv))
        assert list(tmp.iterdir()) == []


@settings(max_examples=40, **SETTINGS)
@given(value=OUT_OF_DOMAIN_YAML, dry_run=st.booleans())
@example(value=2**70, dry_run=True)
def test_cli_refuses_a_spec_seed_in_one_line(value, dry_run):
    with scratch() as tmp:
        (tmp / "spec.yaml").write_text(yaml.safe_dump({**TINY_SPEC, "seed": value}))
        rc, output = run_cli("evaluate", "--config", tmp / "spec.yaml", "--store", tmp / "r.db",
                             *(["--dry-run"] if dry_run else []))
        assert_one_line_naming_seed(rc, output)
        assert "spec.yaml: seed: expected an integer 0 <= seed < 2**63" in output
        assert not (tmp / "r.db").exists()


# -- round trips: the seed given is the seed recorded ---------------------------------------------------
@settings(max_examples=4, **SETTINGS)
@given(seed=SEEDS)
@example(seed=0)
@example(seed=SEED_MAX - 1)
def test_generate_cli_records_the_seed_in_the_manifest(seed):
    with scratch() as tmp:
        rc, output = run_cli("generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--severity", "2",
                             "--limit", "2", "--out", tmp / "g", "--seed", seed)
        assert rc == 0, output
        records = [json.loads(line) for line in (tmp / "g" / "manifest.jsonl").read_text().splitlines()]
        assert len(records) == 2 and all(r["seed"] == seed and type(r["seed"]) is int for r in records)
        dataset, shift = tiny_registry.TinyDataset(n=2), sb.create_shift("_test_noise")
        for r in records:  # the recorded seed rebuilds the recorded params
            assert shift.draw(dataset.load(r["index"]), 2, seed=r["seed"]) == r["params"]
        assert json.loads((tmp / "g" / CONFIG).read_text())["seed"] == seed


@settings(max_examples=3, **SETTINGS)
@given(seed=SEEDS)
@example(seed=SEED_MAX - 1)
def test_evaluate_cli_records_the_seed_in_the_store(seed):
    with scratch() as tmp:
        (tmp / "spec.yaml").write_text(yaml.safe_dump({**TINY_SPEC, "seed": seed}))
        rc, output = run_cli("evaluate", "--config", tmp / "spec.yaml", "--store", tmp / "r.db")
        assert rc == 0, output
        with Store(tmp / "r.db", create=False) as store:
            run = store.run()
        assert run["seed"] == seed and run["spec"]["seed"] == seed


def test_evaluate_api_takes_a_numpy_seed_and_stores_the_int(tmp_path):
    sb.evaluate({**TINY_SPEC, "seed": np.int64(SEED_MAX - 2)}, store=tmp_path / "r.db")
    with Store(tmp_path / "r.db", create=False) as store:
        assert store.run()["seed"] == SEED_MAX - 2


def test_the_seed_and_severity_are_checked_where_they_enter_not_per_sample(tmp_path, monkeypatch):
    """The spec parses the seed and severities once; the run draws every sample with them as parsed
    (``Shift.draw_parsed``): the shifts' own checks are never called downstream."""
    import shiftbench.shifts.base as shift_base

    calls = []
    monkeypatch.setattr(shift_base, "check_seed", lambda seed, where="seed": calls.append(seed) or seed)
    monkeypatch.setattr(shift_base.Shift, "check_severity", lambda self, s: calls.append(s) or s)
    sb.evaluate({**TINY_SPEC, "seed": 5}, store=tmp_path / "r.db")
    assert calls == []
    NOISE.draw(SAMPLE, 2, seed=5)  # the Python API checks each once
    assert calls == [5, 2]


def test_an_edited_spec_object_is_refused_before_setup(tmp_path):
    spec = load_spec({**TINY_SPEC, "seed": 1})
    spec.seed = 2**64
    with pytest.raises(SeedError, match="seed"):
        sb.evaluate(spec, store=tmp_path / "r.db")
    assert not (tmp_path / "r.db").exists()


@settings(max_examples=50, **SETTINGS)
@given(seed=IN_DOMAIN)
def test_a_policy_record_holds_the_seed_given(seed):
    _, record = POLICY.sample(SAMPLE, 0, 3, seed=seed)
    assert record["seed"] == int(seed) and type(record["seed"]) is int
    assert 0 <= record["shift_seed"] < SEED_MAX or record["shift_seed"] is None


# -- distinct seeds, distinct streams --------------------------------------------------------------------
@settings(max_examples=500, **SETTINGS)
@given(seed=SEEDS, sample_id=st.text(max_size=8), name=st.sampled_from(["gaussian_noise", "x"]))
def test_the_first_two_words_are_the_seed_itself(seed, sample_id, name):
    """words[0] + 2**32 * words[1] == seed, each a 32-bit word: seed -> words is injective over the domain
    (and gives the words of before the domain was checked, so every valid seed keeps its stream)."""
    words = derive_seed(seed, sample_id, name)
    assert all(0 <= w < 2**32 for w in words)
    assert words[0] + (words[1] << 32) == seed
    assert words[2:] == derive_seed(0, sample_id, name)[2:]  # the rest depends on (id, name) only


@settings(max_examples=200, **SETTINGS)
@given(a=SEEDS, b=SEEDS, sample_id=st.text(max_size=8))
@example(a=0, b=2**32, sample_id="s")  # the seeds a 32-bit fold would confuse
@example(a=1, b=SEED_MAX - 1, sample_id="s")
def test_distinct_seeds_give_distinct_streams(a, b, sample_id):
    if a == b:
        b = (a + 1) % SEED_MAX
    draw = [make_rng(s, sample_id, "gaussian_noise").integers(2**63, size=4) for s in (a, b)]
    assert not np.array_equal(*draw)


@settings(max_examples=20, **SETTINGS)
@given(a=SEEDS, b=SEEDS)
@example(a=0, b=2**64 % SEED_MAX)
def test_distinct_seeds_give_distinct_noise(a, b):
    if a == b:
        b = (a + 1) % SEED_MAX
    assert not np.array_equal(NOISE(IMAGE, severity=3, seed=a), NOISE(IMAGE, severity=3, seed=b))


# -- the corpus's seed cases -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_seed_cases(case, tmp_path, monkeypatch):
    folder, out = tmp_path / "case", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    case.build(folder)
    monkeypatch.chdir(folder)
    rc, output = run_cli(*[a.replace("{out}", str(out)) for a in case.argv])
    assert rc == case.exit and case.message in output, output
    assert_one_line_naming_seed(rc, output)
    assert list(out.iterdir()) == []
    # the control: the same inputs with a seed of the domain run (a dry run for the specs)
    if case.argv[0] == "generate":
        argv = case.argv[:-1] + ["5"]
    else:
        spec = yaml.safe_load((folder / "spec.yaml").read_text())
        (folder / "spec.yaml").write_text(yaml.safe_dump({**spec, "seed": 5}))
        argv = [a for a in case.argv if a != "--dry-run"] + ["--dry-run"]
    rc, output = run_cli(*[a.replace("{out}", str(out)) for a in argv])
    assert rc == 0, output
