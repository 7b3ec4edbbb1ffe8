"""Composed retrieval streams its queries: rows at any batch size equal a one-pass computation over all
queries, the gallery-feature cache stays bounded over many corrupted-gallery conditions, and the ray engine
gives the local engine's rows."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

import tiny_registry  # noqa: F401  (registers the _test_noise image shift)
from cir_fakes import fake_retrievers

from shiftbench.engine.evaluate import evaluate
from shiftbench.models.retrieval import ComposedRetriever
from shiftbench.engine.retrieval import GalleryCache, _shifted_queries, run_retrieval, setup_retrieval
from shiftbench.metrics.retrieval import RECALL_KS, condition_results, gamma_results
from shiftbench.registry import SHIFTS
from shiftbench.results.store import Store
from shiftbench.spec import load_spec
from shiftbench.tasks.retrieval import retrieve, subset_ranks

SPEC = {"dataset": "objects-cir", "dataset_params": {"split": "val"},
        "models": ["image_only", "text_only", "sum_fusion", "combiner"],
        "shifts": ["clean", {"name": "_test_noise", "severities": [4]}, {"name": "text_swap", "severity": 3}],
        "metrics": ["recall", "recall_subset", "rank"], "limit": 35, "log_samples": True}


@pytest.fixture(scope="module")
def retrievers():
    return fake_retrievers()


def _key(rows):
    return sorted(((r["model"], r["shift"], r["severity"], r["metric"]), r["value"], r["n"]) for r in rows)


def _one_pass(spec: dict, models: dict) -> list:
    """Every query loaded, shifted and ranked at once (the implementation before streaming), as row keys."""
    parsed = load_spec(spec)
    setup = setup_retrieval(parsed, models)
    queries = [setup.dataset.load(i) for i in range(setup.n_queries)]
    out, clean = [], {}
    for s in parsed.shifts:
        for severity in s.severities:
            from shiftbench.condition import Condition
            from shiftbench.engine.kernel import Planned

            cond = Planned(Condition("", "", s.name, dict(s.params), severity), SHIFTS.create(s.name, **s.params))
            shifted = _shifted_queries(queries, cond, parsed.seed)
            for label, model in models.items():
                gallery = np.concatenate([model.gallery_features([setup.dataset.load_gallery(g).image])
                                          for g in setup.gallery.ids])
                composed = model.compose(model.image_features([q.reference.image for q in shifted]),
                                         model.text_features([q.text for q in shifted]))
                sim = None if type(model).similarity is ComposedRetriever.similarity else model.similarity
                _, _, ranks = retrieve(composed, gallery, setup.targets, setup.exclude, k=max(RECALL_KS),
                                       similarity=sim)
                sub = subset_ranks(model.similarity, composed, gallery, setup.targets, setup.subsets)
                results = condition_results(setup.metric_names, ranks, sub, setup.categories, setup.n_queries)
                if s.name == "clean":
                    clean[label] = {k: v[0] for k, v in results.items()}
                else:
                    results.update(gamma_results(results, clean[label]))
                out += [((label, s.name, severity, k), v[0], v[1]) for k, v in results.items()]
    return sorted(out)


@pytest.mark.parametrize("batch_size", [1, 3, 35])
def test_batched_rows_equal_one_pass(batch_size, retrievers):
    rows = evaluate({**SPEC, "batch_size": batch_size}, models=retrievers)
    assert _key(rows) == _one_pass(SPEC, retrievers)


def test_predictions_and_resume_per_batch(tmp_path, retrievers):
    """Each (retriever, condition, batch) is saved on its own: a run stopped after some batches resumes
    from them, and the logged ranks are the rows' ranks."""
    db = tmp_path / "r.db"
    spec = {**SPEC, "batch_size": 4}
    seen = []

    def stop_after(model, b):
        seen.append((model, b))
        if len(seen) == 14:
            raise KeyboardInterrupt("killed")

    with Store(db) as store, pytest.raises(KeyboardInterrupt):
        evaluate(spec, store=store, models=retrievers, on_batch=stop_after)
    with sqlite3.connect(db) as conn:
        saved = conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
    assert saved == 14  # the 14th batch was saved before its callback stopped the run
    resumed_batches = []
    rows = evaluate(spec, store=db, models=retrievers, on_batch=lambda m, b: resumed_batches.append((m, b)))
    n_batches = 9  # 35 queries in batches of 4
    assert len(resumed_batches) == 4 * 3 * n_batches - 14  # nothing saved was computed again
    assert _key(rows) == _one_pass(SPEC, retrievers)
    with Store(db) as store:
        preds = [p for p in store.predictions(rows[0]["run_id"]) if p["model"] == "combiner" and p["shift"] == "clean"]
    assert len(preds) == 35
    ranks = np.array([p["prediction"]["rank"] for p in preds])
    row = next(r for r in rows if (r["model"], r["shift"], r["metric"]) == ("combiner", "clean", "R@5"))
    assert row["value"] == pytest.approx(np.mean(ranks <= 5))


def test_gallery_cache_stays_bounded_over_many_conditions(tmp_path, retrievers):
    spec = load_spec({**SPEC, "dataset_params": {"split": "val", "corrupt_gallery": True}, "batch_size": 8,
                      "shifts": ["clean", {"name": "_test_noise", "severities": [1, 2, 3, 4, 5]},
                                 {"name": "text_swap", "severity": 2}]})
    setup = setup_retrieval(spec, retrievers)
    cache = GalleryCache()
    computed, sizes = set(), []
    features = cache.features

    def watch(model, dataset, gallery, gallery_key, cond, seed):
        out = features(model, dataset, gallery, gallery_key, cond, seed)
        computed.add((model.gallery_key, gallery_key))
        sizes.append(len(cache.corrupted))
        return out

    cache.features = watch
    with Store(tmp_path / "a.db") as store:
        bounded = run_retrieval(spec, store, setup=setup, cache=cache)
    assert len({k for k in computed if k[1] != "clean"}) == 5 * 2  # 5 corrupted galleries x 2 image encoders
    assert max(sizes) <= 2 and len(cache.clean) == 2
    # clean query features are kept per (encoder, image/text, batch) and reused by later conditions
    assert sorted({(k[0], k[1]) for k in cache.queries}) == [("shared:test_shared", "image"), ("shared:test_shared", "text"),
                                                            ("test_colour_grid", "image"), ("test_hashed_words", "text")]
    assert len(cache.queries) == 4 * 5  # 35 queries in batches of 8
    unbounded = GalleryCache(max_corrupted=1000)
    with Store(tmp_path / "b.db") as store:
        reference = run_retrieval(spec, store, setup=setup, cache=unbounded)
    assert len(unbounded.corrupted) == 10
    assert _key(bounded) == _key(reference)
    # the corrupted gallery changes image_only's rows (so the cache held what it should)
    clean = {r["metric"]: r["value"] for r in bounded if (r["model"], r["shift"]) == ("image_only", "clean")}
    noisy = {r["metric"]: r["value"] for r in bounded if (r["model"], r["shift"], r["severity"]) ==
             ("image_only", "_test_noise", 5)}
    assert noisy["mean_rank"] != clean["mean_rank"]


def test_setup_keeps_no_query_images(retrievers):
    setup = setup_retrieval(load_spec(SPEC), retrievers)
    assert len(setup.query_ids) == len(setup.targets) == len(setup.categories) == 35
    assert not any(isinstance(v, list) and v and hasattr(v[0], "reference") for v in vars(setup).values())
