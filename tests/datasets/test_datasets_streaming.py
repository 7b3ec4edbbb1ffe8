"""Streaming readers: WebDataset tar shards and Parquet / Hugging Face ``save_to_disk`` folders written here
from the built-in ``objects`` photos read back with the same ids, labels, label space and pixels as the
equivalent image folder; bad records; lazy reads; and ``sb.evaluate`` giving the image folder's rows."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shiftbench as sb
from e2e import kill_and_resume, row_key
from shiftbench.datasets.common import BadImagesError
from shiftbench.datasets.imagenet import imagenet_classes
from shiftbench.datasets.parquet import ParquetImages
from shiftbench.datasets.webdataset import WebDatasetShards
from shiftbench.errors import ShiftbenchError
from shiftbench.labelspace import LabelSpace

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

WNIDS = [c.wnid for c in imagenet_classes()]
N = 8


def png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def samples():
    ds = sb.load_dataset("objects", limit=N, size=64)
    return [ds.load(i) for i in range(N)]


def write_imagefolder(samples, root: Path) -> Path:
    for i, s in enumerate(samples):
        path = root / s.meta["wnid"] / f"{i:06d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png(s.image))
    return root


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def write_shards(samples, root: Path, per_shard: int = 3, label: str = "cls", extra=None) -> Path:
    """``shard-%06d.tar`` with ``<key>.png`` + a label member; ``label``: ``cls`` (ImageNet index as text,
    with classes.txt of the 1000 wnids), ``json`` ({"wnid": ...}), ``cls-wnid`` (the wnid as text)."""
    root.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(samples), per_shard):
        with tarfile.open(root / f"shard-{start // per_shard:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(start, min(start + per_shard, len(samples))):
                s, key = samples[i], f"{i:06d}"
                add_member(tar, f"{key}.png", png(s.image))
                if label == "cls":
                    add_member(tar, f"{key}.cls", f"{s.label}\n".encode())
                elif label == "json":
                    add_member(tar, f"{key}.json", json.dumps({"wnid": s.meta["wnid"], "caption": s.caption}).encode())
                else:
                    add_member(tar, f"{key}.cls", s.meta["wnid"].encode())
                add_member(tar, f"{key}.txt", s.caption.encode())
                for name, data in (extra or {}).get(i, []):
                    add_member(tar, name, data)
    if label == "cls":
        (root / "classes.txt").write_text("\n".join(WNIDS) + "\n")
    return root


def hf_metadata(names=None) -> dict[bytes, bytes]:
    features = {"image": {"_type": "Image"}, "id": {"dtype": "string", "_type": "Value"}}
    features["label"] = {"names": names, "_type": "ClassLabel"} if names else {"dtype": "int64", "_type": "Value"}
    return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}


def image_table(samples, labels=None, names=None, images=None):
    images = images if images is not None else [png(s.image) for s in samples]
    structs = pa.array([{"bytes": b, "path": None} for b in images],
                       type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    labels = labels if labels is not None else [s.label for s in samples]
    ids = [f"{s.meta['wnid']}/{i:06d}.png" for i, s in enumerate(samples)]
    table = pa.table({"image": structs, "label": pa.array(labels), "id": pa.array(ids)})
    return table.replace_schema_metadata(hf_metadata(names))


def write_parquet(samples, root: Path, files: int = 2, group: int = 2, **kw) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    table = image_table(samples, **kw)
    per = -(-len(samples) // files)
    for f in range(files):
        pq.write_table(table.slice(f * per, per), root / f"train-{f:05d}-of-{files:05d}.parquet", row_group_size=group)
    return root


def write_save_to_disk(samples, root: Path, names=None, labels=None) -> Path:
    """The layout of ``datasets.Dataset.save_to_disk``: IPC stream files, state.json, dataset_info.json."""
    root.mkdir(parents=True, exist_ok=True)
    table = image_table(samples, labels=labels, names=names)
    with pa.OSFile(str(root / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=3):
                writer.write_batch(batch)
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}],
                                                 "_fingerprint": "x", "_split": "train"}))
    info = json.loads(hf_metadata(names)[b"huggingface"])["info"]
    (root / "dataset_info.json").write_text(json.dumps(info))
    return root


def assert_same_samples(ds, samples, ids=None):
    assert len(ds) == len(samples)
    for i, s in enumerate(samples):
        got = ds.load(i)
        assert np.array_equal(got.image, s.image)
        assert (got.label, got.class_name) == (s.label, s.class_name)
        if ids is not None:
            assert got.id == ds.sample_id(i) == ids[i]


# -- webdataset ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("label", ["cls", "json", "cls-wnid"])
def test_webdataset_reads_back_ids_labels_pixels(samples, tmp_path, label):
    root = write_shards(samples, tmp_path / "wds", label=label)
    ds = sb.load_dataset(root)  # detected
    assert isinstance(ds, WebDatasetShards)
    ids = [f"shard-{i // 3:06d}/{i:06d}" for i in range(N)]
    assert_same_samples(ds, samples, ids)
    assert ds.label_space.same_as(LabelSpace.imagenet1k()) and ds.num_classes == 1000
    assert ds.class_names == [c.name for c in imagenet_classes()]
    assert ds.load(5).caption == samples[5].caption and ds.skipped == []
    one = sb.load_dataset(root / "shard-000001.tar")  # one shard alone
    assert [one.sample_id(i) for i in range(len(one))] == ["shard-000001/000003", "shard-000001/000004",
                                                             "shard-000001/000005"]


def test_webdataset_custom_and_numbered_labels(samples, tmp_path):
    root = tmp_path / "names"
    root.mkdir()
    with tarfile.open(root / "a.tar", "w") as tar:
        for i, name in enumerate(["dog", "cat", "dog"]):
            add_member(tar, f"k{i}.jpg", png(samples[i].image))
            add_member(tar, f"k{i}.cls", name.encode())
    ds = sb.load_dataset(root)
    assert ds.label_space.class_names == ("cat", "dog") and [ds.load(i).label for i in range(3)] == [1, 0, 1]
    # integers without class names: a numbered space (maps to no model without a label_map)
    ds = sb.load_dataset(write_shards(samples[:4], tmp_path / "ints"), classes=None)
    assert ds.label_space.name == "imagenet1k"  # classes.txt beside the shards
    (tmp_path / "ints" / "classes.txt").unlink()
    ds = sb.load_dataset(tmp_path / "ints")
    assert ds.label_space.id_kind.startswith("numbered") and ds.num_classes == max(s.label for s in samples[:4]) + 1
    named = sb.load_dataset(tmp_path / "ints", classes=[f"c{i}" for i in range(1000)])
    assert named.load(0).class_name == f"c{samples[0].label}"


def test_webdataset_bad_records(samples, tmp_path):
    root = write_shards(samples, tmp_path / "bad", extra={
        4: [("000004.jpg", b"second image")],           # two images for one key
        6: [("orphan.cls", b"3")]})                    # a label without an image
    # corrupt image bytes in one record
    with tarfile.open(root / "shard-000003.tar", "w") as tar:
        add_member(tar, "broken.png", b"\x89PNG\r\n\x1a\n not a png")
        add_member(tar, "broken.cls", b"1")
        add_member(tar, "nolabel.png", png(samples[0].image))
    with pytest.raises(BadImagesError) as err:
        sb.load_dataset(root)
    names = dict(err.value.files)
    assert set(names) == {"shard-000001.tar:000004", "shard-000002.tar:orphan", "shard-000003.tar:broken",
                          "shard-000003.tar:nolabel"}
    assert "several images" in names["shard-000001.tar:000004"] and "no image" in names["shard-000002.tar:orphan"]
    assert "no label" in names["shard-000003.tar:nolabel"] and "not a readable image" in names["shard-000003.tar:broken"]
    assert "\n" not in str(err.value)
    ds = sb.load_dataset(root, on_error="skip")
    assert len(ds) == N - 1 and len(ds.skipped) == 4 and ds.info()["skipped"] == 4
    assert "shard-000001/000004" not in [ds.sample_id(i) for i in range(len(ds))]


@pytest.mark.parametrize("name", ["/etc/passwd.png", "../up.png", "a/../../b.png"])
def test_webdataset_refuses_escaping_member_names(samples, tmp_path, name):
    root = tmp_path / "evil"
    root.mkdir()
    with tarfile.open(root / "x.tar", "w") as tar:
        add_member(tar, name, png(samples[0].image))
    with pytest.raises(ShiftbenchError, match="x.tar: member .*(absolute|escapes)"):
        sb.load_dataset(root)


def test_webdataset_refuses_compressed_and_non_tar(samples, tmp_path):
    root = tmp_path / "gz"
    root.mkdir()
    with tarfile.open(root / "a.tar", "w:gz") as tar:
        add_member(tar, "k.png", png(samples[0].image))
    with pytest.raises(ShiftbenchError, match="gzip-compressed"):
        sb.load_dataset(root)
    (root / "a.tar").write_bytes(b"no tar here" * 100)
    with pytest.raises(ShiftbenchError, match="not a readable tar"):
        sb.load_dataset(root)


def _opened_files(action):
    """The paths ``action()`` opens (a Python audit hook; hooks cannot be removed, so it switches off)."""
    seen: list[str] = []
    state = {"on": True}

    def hook(event, args):
        if state["on"] and event == "open" and isinstance(args[0], (str, Path)):
            seen.append(str(args[0]))

    sys.addaudithook(hook)
    try:
        action()
    finally:
        state["on"] = False
    return seen


def test_webdataset_load_reads_one_shard_and_one_record(samples, tmp_path):
    root = write_shards(samples, tmp_path / "wds", per_shard=2)
    ds = sb.load_dataset(root, verify="none")
    opened = _opened_files(lambda: ds.load(5))
    assert [Path(p).name for p in opened if p.endswith(".tar")] == ["shard-000002.tar"]
    # and it reads only that record's bytes: the shard's other image is never touched
    reads = []
    real_open = open

    class Counting:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.fh.close()

        def seek(self, *a):
            return self.fh.seek(*a)

        def read(self, n=-1):
            data = self.fh.read(n)
            reads.append(len(data))
            return data

    import shiftbench.datasets.webdataset as W
    W.open = lambda p, mode="r": Counting(real_open(p, mode))  # module-level name lookup comes first
    try:
        ds.load(5)
    finally:
        del W.open
    shard = (root / "shard-000002.tar").stat().st_size
    assert sum(reads) == len(png(samples[5].image)) + len(samples[5].caption.encode()) < shard / 2


# -- parquet / Arrow ----------------------------------------------------------------------------------
def test_parquet_folder_reads_back(samples, tmp_path):
    root = write_parquet(samples, tmp_path / "pq", names=WNIDS)
    ds = sb.load_dataset(root)
    assert isinstance(ds, ParquetImages) and ds.image_column == "image" and ds.label_column == "label"
    ids = [f"train-{i // 4:05d}-of-00002/{i % 4}" for i in range(N)]
    assert_same_samples(ds, samples, ids)
    assert ds.label_space.same_as(LabelSpace.imagenet1k())
    # an id column gives the ids
    ds = sb.load_dataset(root, id_column="id")
    assert [ds.sample_id(i) for i in range(N)] == [f"{s.meta['wnid']}/{i:06d}.png" for i, s in enumerate(samples)]


def test_hf_save_to_disk_reads_back(samples, tmp_path):
    lemmas = [c.lemmas for c in imagenet_classes()]  # how hub datasets spell ImageNet's ClassLabel
    root = write_save_to_disk(samples, tmp_path / "hf", names=lemmas)
    ds = sb.load_dataset(root)
    assert isinstance(ds, ParquetImages) and ds.label_space.same_as(LabelSpace.imagenet1k())
    assert_same_samples(ds, samples, [f"data-00000-of-00001/{i}" for i in range(N)])
    # a DatasetDict folder: the split is chosen, or the only one taken
    dd = tmp_path / "dd"
    write_save_to_disk(samples[:3], dd / "validation", names=lemmas)
    (dd / "dataset_dict.json").write_text(json.dumps({"splits": ["validation"]}))
    assert len(sb.load_dataset(dd)) == 3
    (dd / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "validation"]}))
    with pytest.raises(ShiftbenchError, match="pass split= one of: train, validation"):
        sb.load_dataset(dd)
    assert len(sb.load_dataset(dd, split="validation")) == 3


def test_parquet_string_labels_and_plain_binary(samples, tmp_path):
    root = tmp_path / "plain"
    root.mkdir()
    table = pa.table({"jpg": pa.array([png(s.image) for s in samples]),
                      "class_name": pa.array(["cat" if i % 3 else "dog" for i in range(N)])})
    pq.write_table(table, root / "x.parquet")
    ds = sb.load_dataset(root)
    assert ds.image_column == "jpg" and ds.label_column == "class_name"
    assert ds.label_space.class_names == ("cat", "dog")
    assert [ds.load(i).class_name for i in range(N)] == ["cat" if i % 3 else "dog" for i in range(N)]
    wn = sb.load_dataset(write_parquet(samples, tmp_path / "wn", files=1, labels=[s.meta["wnid"] for s in samples]))
    assert wn.label_space.name == "imagenet1k" and [wn.load(i).label for i in range(N)] == [s.label for s in samples]


def test_parquet_bad_inputs(samples, tmp_path):
    images = [png(s.image) for s in samples]
    images[3] = b"\xff\xd8\xff garbage"
    root = write_parquet(samples, tmp_path / "bad", images=images, names=WNIDS)
    with pytest.raises(BadImagesError, match=r"train-00000-of-00002.parquet row 3 \(not a readable image"):
        sb.load_dataset(root)
    ds = sb.load_dataset(root, on_error="skip")
    assert len(ds) == N - 1 and ds.skipped[0][0] == "train-00000-of-00002.parquet row 3"
    with pytest.raises(ShiftbenchError, match=r"label_column 'y' is not a column .*\(columns: image \(struct"):
        sb.load_dataset(root, label_column="y")
    with pytest.raises(ShiftbenchError, match=r"image_column 'label' is int64, not image bytes"):
        sb.load_dataset(root, image_column="label")
    nolabel = tmp_path / "nolabel"
    nolabel.mkdir()
    pq.write_table(pa.table({"image": pa.array(images[:2]), "score": pa.array([0.5, 1.0])}), nolabel / "a.parquet")
    with pytest.raises(ShiftbenchError, match=r"no label column .*label_column=False.*columns: image \(binary\), "
                                              r"score \(double\)"):
        sb.load_dataset(nolabel)
    assert sb.load_dataset(nolabel, label_column=False).load(0).label is None
    # an HF image path that leaves the folder is refused; a label outside the ClassLabel names is a bad record
    evil = tmp_path / "evil"
    evil.mkdir()
    structs = pa.array([{"bytes": None, "path": "../secret.png"}],
                       type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"image": structs, "label": pa.array([0])}), evil / "a.parquet")
    with pytest.raises(BadImagesError, match=r"escapes the dataset root"):
        sb.load_dataset(evil)
    far = write_save_to_disk(samples[:2], tmp_path / "far", names=["a", "b"], labels=[0, 5])
    with pytest.raises(BadImagesError, match=r"data-00000-of-00001.arrow row 1 \(label 5 outside the 2 classes"):
        sb.load_dataset(far)


def test_arrow_is_memory_mapped_and_parquet_reads_one_row_group(samples, tmp_path):
    """Reading an image allocates about one row's bytes (Arrow) or one row group (Parquet), not the table."""
    many = samples * 8  # 64 rows
    hf = write_save_to_disk(many, tmp_path / "hf", names=WNIDS)
    total = (hf / "data-00000-of-00001.arrow").stat().st_size
    before = pa.total_allocated_bytes()
    ds = sb.load_dataset(hf, verify="none")
    ds.load(40)
    held = pa.total_allocated_bytes() - before
    assert held < total / 10, (held, total)  # the image bytes stay in the memory map
    root = write_parquet(many, tmp_path / "pq", files=1, group=4, names=WNIDS)
    ds = sb.load_dataset(root, verify="none")
    before = pa.total_allocated_bytes()
    assert np.array_equal(ds.load(41).image, many[41].image)
    held = pa.total_allocated_bytes() - before
    group_bytes = sum(len(png(s.image)) for s in many[40:44])
    assert held < 2 * group_bytes + 65536 < (root / "train-00000-of-00001.parquet").stat().st_size, held


# -- end to end ----------------------------------------------------------------------------------------
def _rows_without_dataset(rows):
    return [k[:1] + k[2:] for k in row_key(rows)]


@pytest.mark.parametrize("fmt", ["webdataset", "parquet"])
def test_evaluate_on_streams_equals_image_folder(samples, tmp_path, fmt, one_thread):
    folder = write_imagefolder(samples, tmp_path / "folder")
    shifts = ["clean", {"name": "brightness", "severities": [3]}, {"name": "pixelate", "severities": [2]}]
    params = {}
    if fmt == "webdataset":
        stream = write_shards(samples, tmp_path / "wds")
    else:  # with the image folder's ids, even the noise (seeded by sample id) is the same
        stream = write_parquet(samples, tmp_path / "pq", names=WNIDS)
        params = {"id_column": "id"}
        shifts.append({"name": "gaussian_noise", "severities": [2]})
    base = {"models": ["efficientnet_lite0"], "shifts": shifts, "metrics": ["top1", "ece"], "seed": 0,
            "batch_size": 4}
    ref = sb.evaluate({**base, "dataset": str(folder)}, store=tmp_path / "folder.db")
    got = sb.evaluate({**base, "dataset": str(stream), "dataset_params": params}, store=tmp_path / f"{fmt}.db")
    assert len(ref) == len(got) >= 2 * len(shifts) and _rows_without_dataset(got) == _rows_without_dataset(ref)


def test_kill_and_resume_on_webdataset(samples, tmp_path, one_thread):
    root = write_shards(samples, tmp_path / "wds", per_shard=2)
    spec = {"dataset": str(root), "models": ["efficientnet_lite0"], "batch_size": 2, "seed": 0,
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [1, 3]}], "metrics": ["top1"]}
    ref, resumed, partial = kill_and_resume(spec, tmp_path, min_batches=2, delay=0.4)
    assert 0 <= len(partial) < len(ref) and row_key(resumed) == row_key(ref)
