"""Shape versus texture from exact masks (issue 29 item 3): the ``objects-cue-conflict`` set and the ``shape_bias`` metric.

The set: the same seed gives the same bytes; a cue-conflict image's object pixels are the texture object's own
pixels (a patch inside its mask, tiled with mirroring, checked against an independent fold of the coordinates),
its ground is the neutral grey, its mask is the shape object's exact mask; the controls show that texture
alone and that silhouette alone. The metric: a synthetic model with known decisions gives the known shape bias,
and its interval is the percentile bootstrap over images (checked against a loop written here). Bad parameters
are refused in one line. One run goes the user's way: ``shiftbench evaluate`` -> store -> ``shiftbench report``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shiftbench as sb
from shiftbench.cli import main
from shiftbench.datasets import cue_conflict, objects
from shiftbench.datasets.cue_conflict import GROUND, SILHOUETTE_FILL, CueConflictDataset
from shiftbench.errors import ShiftbenchError
from shiftbench.labelspace import LabelSpace
from shiftbench.metrics.shape_bias import CueTarget, ShapeBias, cue_target, set_decisions, shape_bias_interval
from shiftbench.registry import METRICS
from shiftbench.results.codec import decode_state, encode_state
from shiftbench.results.store import Store

SMALL = {"textures_per_shape": 2, "texture_crops": 1}  # per shape object: 2 conflicts, its silhouette, 1 texture


@pytest.fixture(scope="module")
def small() -> CueConflictDataset:
    return CueConflictDataset(**SMALL)


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert text and "\n" not in text, text
    return text


# -- the set ---------------------------------------------------------------------------------------
def test_the_default_set_holds_every_shape_and_only_kept_textures():
    ds = sb.load_dataset("objects-cue-conflict")
    kept = set(cue_conflict.kept_texture_classes())
    assert 0 < len(kept) < len(cue_conflict.set_classes()) == 80
    cues = {"conflict": 0, "texture": 0, "silhouette": 0}
    texture_wnids, shapes = set(), set()
    for i in range(len(ds)):
        sid = ds.sample_id(i)
        cues[sid.split("/")[0]] += 1
    assert cues == {"conflict": 94 * 8, "silhouette": 94, "texture": 4 * len(ds.texture_list)}
    assert len(ds) == sb.DATASETS.entry("objects-cue-conflict").meta["size"]  # what `shiftbench list` says
    for oid in ds.texture_list:
        texture_wnids.add(objects.object_info(oid).wnid)
    assert texture_wnids == kept  # every kept class gives a texture (a kept class had texture images)
    conflicts = [ds.load(i) for i in range(0, 40)]
    for s in conflicts:
        shapes.add(s.meta["shape_object"])
        if s.meta["cue"] == "conflict":
            assert s.meta["texture_wnid"] in kept and s.meta["shape_wnid"] != s.meta["texture_wnid"]
        assert s.meta["decision_wnids"] == list(cue_conflict.set_classes())


@pytest.mark.parametrize("index", [0, 2, 3])  # a conflict, the silhouette, the texture (SMALL's order)
def test_the_same_seed_gives_the_same_bytes(index):
    a, b = CueConflictDataset(seed=7, **SMALL).load(index), CueConflictDataset(seed=7, **SMALL).load(index)
    assert a.id == b.id and a.image.tobytes() == b.image.tobytes() and a.mask.tobytes() == b.mask.tobytes()
    assert json.dumps(a.meta, sort_keys=True) == json.dumps(b.meta, sort_keys=True)
    # other seeds: other patches, other flips (a silhouette has only its flip, p = 1/2)
    others = [CueConflictDataset(seed=k, **SMALL).load(index).image.tobytes() for k in (8, 9, 10, 11)]
    assert any(o != a.image.tobytes() for o in others)


def _folded_tiling(patch: np.ndarray, h: int, w: int) -> np.ndarray:
    """The mirrored tiling written another way: pixel (y, x) shows patch pixel (fold(y), fold(x))."""
    side = patch.shape[0]

    def fold(i: np.ndarray) -> np.ndarray:
        r = i % (2 * side)
        return np.where(r < side, r, 2 * side - 1 - r)

    return patch[fold(np.arange(h))[:, None], fold(np.arange(w))[None, :]]


def _source_patch(meta: dict) -> np.ndarray:
    """The patch the meta names, cut from the texture object's cut-out, checked to lie inside its mask."""
    p = meta["patch"]
    cut = objects.cutout(meta["texture_object"])
    window = cut[p["y"]:p["y"] + p["side"], p["x"]:p["x"] + p["side"]]
    assert window.shape[:2] == (p["side"], p["side"])
    assert (window[..., 3] >= objects.ALPHA_THRESHOLD).all()  # every texture pixel is the object's, not its ground
    assert cue_conflict.PATCH_MIN <= p["side"] <= cue_conflict.PATCH_MAX
    return window[..., :3]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), shape=st.integers(0, 93), which=st.integers(0, 1))
def test_a_cue_conflict_image_is_the_shape_mask_filled_with_the_texture_on_grey(seed, shape, which):
    ds = CueConflictDataset(seed=seed, **SMALL)
    at = {ds.sample_id(i): i for i in range(len(ds))}
    oid = objects.object_ids()[shape]
    conflicts = [k for k in at if k.startswith(f"conflict/{oid}+")]
    assert len(conflicts) == SMALL["textures_per_shape"]
    s = ds.load(at[conflicts[which]])
    meta = s.meta
    assert meta["cue"] == "conflict" and meta["shape_object"] == oid
    assert s.label == meta["shape_label"] != meta["texture_label"]
    h, w = s.image.shape[:2]
    # the mask is the shape object's exact mask in its placement, kept as the sample's mask
    _, mask = objects.layer(oid, objects.Placement.from_dict(meta["placement"]))
    assert s.mask.dtype == bool and np.array_equal(s.mask, mask) and 0 < mask.sum() < mask.size
    # object pixels: the texture patch tiled with mirroring; ground: the neutral grey, every pixel
    tiled = _folded_tiling(_source_patch(meta), h, w)
    assert np.array_equal(s.image[s.mask], tiled[s.mask])
    assert (s.image[~s.mask] == np.array(GROUND, np.uint8)).all()
    # its silhouette and its texture control show the same mask and the same patch alone
    sil = ds.load(at[f"silhouette/{oid}/s{seed}"])
    assert sil.label == s.label and np.array_equal(sil.mask, s.mask)
    assert (sil.image[sil.mask] == SILHOUETTE_FILL).all() and (sil.image[~sil.mask] == GROUND).all()
    t = ds.load(at[f"texture/{meta['texture_object']}#{meta['patch']['crop']}/s{seed}"])
    assert t.label == meta["texture_label"] and t.meta["patch"] == meta["patch"]
    assert np.array_equal(t.image, tiled) and t.mask.all()


def test_the_texture_controls_show_exactly_the_conflicts_textures():
    ds = CueConflictDataset(textures_per_shape=3, texture_crops=2)
    used, shown = set(), set()
    for i in range(len(ds)):
        sid = ds.sample_id(i)
        if sid.startswith("conflict/"):
            used.add(sid.split("+")[1].split("/")[0])
        elif sid.startswith("texture/"):
            shown.add(sid.split("/")[1])
    assert used == shown and len(shown) == 2 * len(ds.texture_list)


def test_cue_selects_one_kind_in_the_same_order(small):
    for cue in ("conflict", "texture", "silhouette"):
        one = CueConflictDataset(cue=cue, **SMALL)
        ids = [small.sample_id(i) for i in range(len(small)) if small.sample_id(i).startswith(cue + "/")]
        assert [one.sample_id(i) for i in range(len(one))] == ids


@pytest.mark.parametrize("params, words", [
    ({"cue": "both"}, "cue must be one of"),
    ({"textures_per_shape": 0}, "textures_per_shape must be an int in 1.."),
    ({"textures_per_shape": 500}, "textures_per_shape must be an int in 1.."),
    ({"textures_per_shape": "3"}, "textures_per_shape"),
    ({"texture_crops": 0}, "texture_crops must be an int in 1..16"),
    ({"texture_crops": True}, "texture_crops"),
    ({"texture_classes": "some"}, "texture_classes must be 'kept', 'all'"),
    ({"texture_classes": []}, "texture_classes must be"),
    ({"texture_classes": ["n99999999"]}, "'n99999999' is not a class of the set"),
    ({"texture_classes": ["goldfish"]}, "'goldfish' is not a class of the set"),
    ({"texture_classes": ["zebra"]}, "textures of at least two classes"),
    ({"seed": -1}, "seed"),
    ({"size": 4}, "size must be between 8 and 8192"),
])
def test_bad_parameters_are_refused_in_one_line(params, words):
    with pytest.raises(ShiftbenchError) as exc:
        CueConflictDataset(**params)
    assert words in one_line(exc)


def test_texture_classes_by_name_or_wnid():
    by_name = CueConflictDataset(texture_classes=["zebra", "n07745940"], textures_per_shape=1)
    assert {objects.object_info(o).wnid for o in by_name.texture_list} == {"n02391049", "n07745940"}
    alone = CueConflictDataset(cue="texture", texture_classes=["zebra"], texture_crops=3)  # controls: no pairing
    assert [alone.sample_id(i) for i in range(len(alone))] == [f"texture/zebra#{k}/s0" for k in range(3)]


def test_a_bad_dataset_param_in_a_spec_is_one_error_line(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("dataset: objects-cue-conflict\ndataset_params: {cue: both}\nmodels: [efficientnet_lite0]\n"
                    "shifts: [clean]\nmetrics: [shape_bias]\n")
    assert main(["evaluate", "--config", str(spec), "--store", str(tmp_path / "x.db")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and "cue must be one of" in err[0], err


# -- the metric --------------------------------------------------------------------------------------
CLASSES = [7, 291, 340, 386, 948]  # cock, lion, zebra, African elephant, Granny Smith (ImageNet-1k indices)


def _scores(decisions: list[int], outside: int | None = None) -> np.ndarray:
    """Scores (N, 1000) whose decision among CLASSES is ``decisions[i]``; ``outside`` gets the highest score of
    all, a class not in the set, which a decision among the set's classes must ignore."""
    scores = np.random.default_rng(0).normal(0, 1, (len(decisions), 1000))
    for i, d in enumerate(decisions):
        scores[i, d] = 20.0
        if outside is not None:
            scores[i, outside] = 50.0
    return scores


def test_shape_bias_of_known_decisions_is_the_known_fraction():
    # 30 conflicts (shape zebra, texture lion): 12 shape, 6 texture, 12 other decisions -> 12 / 18
    decisions = [340] * 12 + [291] * 6 + [7] * 6 + [948] * 6
    targets = [CueTarget("conflict", 340, 291, CLASSES)] * 30
    # 10 texture-alone (lion): 4 right; 8 silhouettes (elephant): 2 right
    decisions += [291] * 4 + [340] * 6 + [386] * 2 + [7] * 6
    targets += [CueTarget("texture", -1, 291, CLASSES)] * 10 + [CueTarget("silhouette", 386, -1, CLASSES)] * 8
    m = METRICS.create("shape_bias")
    m.update(_scores(decisions, outside=999), targets)  # the top class overall (999) is not in the set
    out = m.compute()
    assert out == pytest.approx({"shape_bias": 12 / 18, "cue_decided": 18 / 30, "texture_alone_acc": 0.4,
                                 "silhouette_alone_acc": 0.25, "cue_chance": 0.2})
    assert m.state() == {"shape_decisions": 12, "texture_decisions": 6, "conflict_images": 30, "texture_images": 10,
                         "silhouette_images": 8, "classes": 5}
    kind, rows = m.per_sample()["shape_bias"]
    assert kind == "ratio" and np.isnan(rows[30:]).all() and np.nansum(rows[:, 0]) / np.nansum(rows[:, 1]) == 12 / 18


def test_the_interval_is_the_percentile_bootstrap_over_images():
    rng = np.random.default_rng(3)
    kind = rng.integers(0, 3, 60)  # 0 shape, 1 texture, 2 neither
    shape, texture = (kind == 0).astype(float), (kind == 1).astype(float)
    value, low, high = shape_bias_interval(shape, texture, seed=5, n_boot=400)
    # the reference: the same draws (one generator, PCG64(seed), n indices per resample), ratio of sums, quantiles
    draws = np.random.Generator(np.random.PCG64(5)).integers(0, 60, size=(400, 60))
    boots = np.array([shape[d].sum() / (shape[d] + texture[d]).sum() for d in draws])
    assert value == shape.sum() / (shape + texture).sum()
    assert (low, high) == pytest.approx(tuple(np.quantile(boots, [0.025, 0.975])), abs=1e-12)
    assert low < value < high
    assert shape_bias_interval([1, 1, 0, 0], [0, 0, 0, 0]) == (1.0, 1.0, 1.0)


def test_decisions_are_taken_among_the_sets_classes_ties_to_the_lower_index():
    scores = np.zeros((2, 1000))
    scores[0, [291, 340]] = 3.0  # a tie inside the set
    scores[1, 340], scores[1, 0] = 2.0, 9.0  # the overall top class lies outside the set
    assert set_decisions(scores, [340, 291]).tolist() == [291, 340]


def test_split_states_through_the_store_codec_merge_to_one_pass():
    rng = np.random.default_rng(1)
    n = 23
    cues = rng.choice(["conflict", "texture", "silhouette"], n)
    targets = [CueTarget(str(c), 340 if c != "texture" else -1, 291 if c != "silhouette" else -1, CLASSES) for c in cues]
    scores = _scores([int(rng.choice(CLASSES)) for _ in range(n)])
    one = ShapeBias()
    one.update(scores, targets)
    total = ShapeBias()
    for lo, hi in ((0, 5), (5, 5), (5, 17), (17, 23)):
        part = ShapeBias()
        if hi > lo:
            part.update(scores[lo:hi], targets[lo:hi])
        total.merge_state(decode_state(json.loads(json.dumps(encode_state(part.state_dict())))))
    assert total.compute() == one.compute() and total.n == n
    for key, (kind, values) in one.per_sample().items():
        assert total.per_sample()[key][0] == kind
        np.testing.assert_array_equal(total.per_sample()[key][1], values)


def test_undefined_and_empty():
    m = ShapeBias()
    assert np.isnan(m.compute()["shape_bias"])
    m.update(_scores([7]), [CueTarget("conflict", 340, 291, CLASSES)])  # neither cue decides
    assert m.compute()["shape_bias"] is None and "either cue" in m.undefined_reason("shape_bias")


def test_the_metric_refuses_in_one_line(small):
    m = ShapeBias()
    with pytest.raises(ShiftbenchError) as exc:
        m.update(np.zeros((1, 10)), [CueTarget("conflict", 1, 2, [1, 2])])
    assert "ImageNet-1k scores (N, 1000)" in one_line(exc)
    with pytest.raises(ShiftbenchError) as exc:
        m.update(np.zeros((1, 1000)), [CueTarget("style", 1, 2, [1, 2])])
    assert "cue must be one of" in one_line(exc)
    plain = sb.load_dataset("objects").load(0)
    with pytest.raises(ShiftbenchError) as exc:
        m.update_from_samples(np.zeros((1, 1000)), [plain])
    assert "not a cue-conflict image" in one_line(exc) and "objects-cue-conflict" in str(exc.value)
    with pytest.raises(ShiftbenchError) as exc:
        shape_bias_interval([1, 0], [1, 0])
    assert "never both" in one_line(exc)
    target = cue_target(small.load(0))
    space = LabelSpace.imagenet1k()
    assert target.shape == small.load(0).meta["shape_label"] == space.index(small.load(0).meta["shape_wnid"])


# -- the user's path: evaluate -> store -> report ------------------------------------------------------
def test_evaluate_store_report_shows_shape_bias_with_the_controls(tmp_path, capsys):
    spec = tmp_path / "shape.yaml"
    spec.write_text("name: shape-smoke\ndataset: objects-cue-conflict\n"
                    "dataset_params: {textures_per_shape: 2, texture_crops: 1}\nmodels: [efficientnet_lite0]\n"
                    "shifts: [clean]\nmetrics: [shape_bias]\nseed: 0\nlimit: 12\n")
    db, results = tmp_path / "shape.db", tmp_path / "rows.json"
    assert main(["evaluate", "--config", str(spec), "--store", str(db), "--results-json", str(results)]) == 0
    printed = capsys.readouterr().out
    assert "shape_bias" in printed and "texture alone" in printed
    rows = {r["metric"]: r for r in json.loads(results.read_text())}
    assert set(rows) == {"shape_bias", "cue_decided", "texture_alone_acc", "silhouette_alone_acc", "cue_chance"}
    assert rows["cue_chance"]["value"] == pytest.approx(1 / 80) and rows["shape_bias"]["n"] == 12
    # the stored value is the one a direct computation gives on the same 12 images
    ds = CueConflictDataset(textures_per_shape=2, texture_crops=1)
    samples = [ds.load(i) for i in range(12)]
    logits = sb.create_model("efficientnet_lite0").predict_logits([s.image for s in samples])
    direct = ShapeBias()
    direct.update_from_samples(logits, samples)
    for key, value in direct.compute().items():
        assert rows[key]["value"] == (None if value is None else pytest.approx(value, abs=1e-12)), key
    with Store(db) as store:
        stored = {s["metric"]: s for s in store.samples(store.runs()[-1]["run_id"])}
    # 12 images: 3 shape objects, each with 2 conflicts, its silhouette and one texture alone
    assert stored["shape_bias"]["kind"] == "ratio" and len(stored["shape_bias"]["ids"]) == 6  # the 6 conflicts
    assert all(i.startswith("conflict/") for i in stored["shape_bias"]["ids"])
    assert len(stored["texture_alone_acc"]["ids"]) == 3 and len(stored["silhouette_alone_acc"]["ids"]) == 3

    from shiftbench.report import run_headline

    head = run_headline(db)
    assert head.metric == "shape_bias"
    heads = [c.head for c in head.columns]
    assert heads == ["shape_bias (%)", "cue decided (%)", "texture alone (%)", "silhouette alone (%)", "chance (%)"]
    assert [g for g, _ in head.groups] == ["clean", "cue conflict", "single-cue controls"]
    cells = head.rows[0].cells
    assert cells[0].ci.startswith("[") and cells[0].n == 12  # shape bias with its CI; n: the condition's images
    assert cells[1].n == 6 and cells[2].n == cells[3].n == 3 and cells[4].text == "1.2"
    out = tmp_path / "report"
    assert main(["report", "--store", str(db), "--out", str(out)]) == 0
    capsys.readouterr()
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "shape_bias (%)" in html and "silhouette alone (%)" in html and cells[0].ci in html
    assert "shape_bias" in (out / "tables.md").read_text(encoding="utf-8")
