"""`generate --protocol imagenet-c` and generate's preprocessing and encodings.

The preset is make_imagenet_c.py's procedure (hendrycks/robustness): torchvision's ``Resize(256)`` and
``CenterCrop(224)`` on a PIL image, the corruption, ``Image.save(path, quality=85, optimize=True)`` into
``<corruption>/<severity>/<wnid>/<original file name>``. Each written file is compared byte for byte with that
procedure written out here with Pillow alone (torchvision's size rule and crop corner spelled out), and the
folder is read back as an image folder of the same classes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shiftbench as sb
import tiny_registry  # noqa: F401 - _test_tiny, _test_noise
from shiftbench.cli import main
from shiftbench.engine.generate import generate
from shiftbench.errors import ShiftbenchError
from shiftbench.registry import SHIFTS
from shiftbench.sample import Sample, load_image

from conftest import make_image

# ImageNet wnids (tench, English springer) as class folders; file names as ImageNet's, one a PNG, one nested
FILES = {"n01440764/ILSVRC2012_val_00000293.JPEG": (375, 500), "n01440764/ILSVRC2012_val_00002138.JPEG": (500, 333),
         "n02102040/ILSVRC2012_val_00000994.JPEG": (300, 227), "n02102040/own photo.png": (256, 300),
         "n02102040/more/deep.jpg": (260, 260)}


def write_folder(root: Path) -> Path:
    for i, (rel, (h, w)) in enumerate(FILES.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(make_image(h, w, seed=i)).save(path, format="PNG" if rel.endswith(".png") else "JPEG", quality=90)
    return root


def published(source: Path, shift: str, params: dict) -> bytes:
    """make_imagenet_c.py on one file, with Pillow alone: open, convert RGB, Resize(256) (shorter side 256, the
    longer int(256 * long / short), bilinear), CenterCrop(224) (corner int(round((h - 224) / 2.0))), the shift
    (replayed from its recorded params), save JPEG quality 85 optimize."""
    with Image.open(source) as img:
        img = img.convert("RGB")
        w, h = img.size
        size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
        img = img.resize(size, Image.BILINEAR)
        top, left = int(round((size[1] - 224) / 2.0)), int(round((size[0] - 224) / 2.0))
        img = img.crop((left, top, left + 224, top + 224))
    shifted = SHIFTS.create(shift).replay(Sample(image=np.asarray(img), id="x"), params).image
    buf = io.BytesIO()
    Image.fromarray(shifted).save(buf, format="JPEG", quality=85, optimize=True)
    return buf.getvalue()


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def imagenet_c(tmp_path_factory):
    root = write_folder(tmp_path_factory.mktemp("src") / "val")
    out = tmp_path_factory.mktemp("gen") / "imagenet-c"
    lines: list[str] = []
    summary = generate(str(root), ["gaussian_noise", "motion_blur"], [1, 3], out, protocol="imagenet-c", seed=7,
                       announce=lines.append)
    return root, out, summary, lines


def test_layout_is_imagenet_cs_with_the_original_file_names(imagenet_c):
    root, out, summary, _ = imagenet_c
    assert summary == {"written": 20, "skipped": 0, "total": 20, "unreadable": 0}
    files = sorted(p.relative_to(out / "gaussian_noise" / "3").as_posix()
                   for p in (out / "gaussian_noise" / "3").rglob("*") if p.is_file())
    # names kept, .JPEG too; a PNG source becomes .jpg (JPEG bytes); a deeper folder is dropped, as the script does
    assert files == ["n01440764/ILSVRC2012_val_00000293.JPEG", "n01440764/ILSVRC2012_val_00002138.JPEG",
                     "n02102040/ILSVRC2012_val_00000994.JPEG", "n02102040/deep.jpg", "n02102040/own photo.jpg"]
    assert {p.name for p in out.iterdir()} == {"gaussian_noise", "motion_blur", "manifest.jsonl", "generate.json"}


def test_every_file_is_the_published_procedure_to_the_byte(imagenet_c):
    root, out, _, _ = imagenet_c
    for r in records(out):
        assert (out / r["output"]).read_bytes() == published(root / r["source"], r["shift"], r["params"]), r["output"]
        with Image.open(out / r["output"]) as img:
            assert img.format == "JPEG" and img.size == (224, 224)


def test_settings_and_every_record_say_the_protocol_and_its_preprocessing(imagenet_c):
    _, out, _, lines = imagenet_c
    settings = json.loads((out / "generate.json").read_text())
    preprocess = {"resize": 256, "interpolation": "bilinear", "crop": [224, 224]}
    assert settings["protocol"] == "imagenet-c" and settings["preprocess"] == preprocess
    assert settings["format"] == "jpeg" and settings["jpeg_quality"] == 85
    for r in records(out):
        assert r["protocol"] == "imagenet-c" and r["preprocess"] == preprocess
        assert r["format"] == "jpeg (lossy, quality 85, optimize)"


def test_the_expected_output_is_said_before_the_work_and_is_close(imagenet_c):
    _, out, _, lines = imagenet_c
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith("generate: 5 image(s) x 2 shift(s) x 2 severities = 20 files, about ")
    assert "jpeg (lossy, quality 85, optimize); resize shorter side to 256 (bilinear, Pillow), then centre crop " \
           "224x224" in line
    value, unit = line.split("about ")[1].split(" (")[0].split()
    estimate = float(value) * {"B": 1, "kB": 1e3, "MB": 1e6}[unit]
    actual = sum(p.stat().st_size for p in out.rglob("*") if p.suffix.lower() in (".jpeg", ".jpg"))
    assert 0.5 < estimate / actual < 2


def test_the_folder_is_read_back_as_imagenet_labelled_image_folder_and_evaluated(imagenet_c, tmp_path):
    root, out, _, _ = imagenet_c
    source, shifted = sb.load_dataset(str(root)), sb.load_dataset(str(out / "gaussian_noise" / "3"))
    assert shifted.label_space == source.label_space and len(shifted) == 5
    labels = {Path(source.sample_id(i)).parts[0]: source.load(i).label for i in range(len(source))}
    for i in range(len(shifted)):
        s = shifted.load(i)
        assert s.image.shape == (224, 224, 3) and s.label == labels[Path(s.id).parts[0]]
    rows = sb.evaluate({"dataset": str(out / "gaussian_noise" / "3"), "models": ["dummy_classifier"],
                        "shifts": ["clean"], "metrics": ["top1"]}, store=tmp_path / "r.db")
    assert rows and rows[0]["n"] == 5


def test_a_second_run_resumes_and_other_preprocessing_is_refused(imagenet_c):
    root, out, _, _ = imagenet_c
    again = generate(str(root), ["gaussian_noise", "motion_blur"], [1, 3], out, protocol="imagenet-c", seed=7)
    assert again["written"] == 0 and again["skipped"] == 20
    with pytest.raises(ShiftbenchError, match=r"holds outputs generated with other settings \(.*preprocess: .*"
                                              r"'crop': \[200, 200\]}, protocol: 'imagenet-c' -> None\)"):
        generate(str(root), ["gaussian_noise"], [1], out, resize=256, crop=200, seed=7)


@pytest.mark.parametrize("kwargs, message", [
    ({"protocol": "imagenet-c", "crop": 200}, r"--crop 200: the imagenet-c protocol fixes --resize 256 --crop 224"),
    ({"protocol": "imagenet-c", "resize": 256, "crop": [224, 224], "layout": "webdataset"},
     r"--protocol imagenet-c writes imagenet-c's folder layout; drop --format webdataset"),
    ({"protocol": "imagenet-x"}, r"protocol 'imagenet-x': expected one of imagenet-c, imagenet-p"),
    ({"resize": 0}, r"generate\.resize: expected a positive integer"),
    ({"interpolation": "bicubic"}, r"generate\.interpolation: only a resize takes it"),
    ({"image_format": "gif"}, r"image format 'gif': expected one of png, jpeg, webp"),
    ({"image_format": "webp", "quality": 0}, r"quality 0: expected an integer in 1\.\.100"),
])
def test_bad_options_are_refused_before_any_work(tmp_path, kwargs, message):
    with pytest.raises(ShiftbenchError, match=message):
        generate("_test_tiny", ["_test_noise"], [1], tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_protocol_needs_class_folders_and_preprocessing_refuses_copied_annotations(tmp_path):
    import coco_synth

    with pytest.raises(ShiftbenchError, match=r"generate --protocol: the dataset gives no class folder"):
        generate("objects", ["gaussian_noise"], [1], tmp_path / "a", protocol="imagenet-c", limit=2)
    coco = coco_synth.write_coco_set(tmp_path / "coco", n_images=2)
    with pytest.raises(ShiftbenchError, match=r"generate --resize/--crop: .* has annotation files"):
        generate(str(coco), ["gaussian_noise"], [1], tmp_path / "b", resize=48)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_preprocessed_generate_is_what_a_run_with_that_preprocess_section_sees(tmp_path):
    """Lossless output of ``resize``/``crop``: the pixels the run's loader gives for the same spec section."""
    from shiftbench.condition import Condition
    from shiftbench.engine.kernel import Loader, Planned
    from shiftbench.spec import load_spec

    out = tmp_path / "out"
    generate("_test_tiny", ["_test_noise"], [2], out, seed=3, limit=4, resize=30, crop=[24, 20],
             interpolation="lanczos")
    section = load_spec({"dataset": "_test_tiny", "models": ["m"], "shifts": ["clean"], "metrics": ["top1"],
                         "preprocess": {"resize": 30, "crop": [24, 20], "interpolation": "lanczos"}},
                        check_names=False).preprocess
    batch = Loader(sb.load_dataset("_test_tiny"), 3, preprocess=section).load(
        Planned(Condition("", "", "_test_noise", {}, 2), sb.create_shift("_test_noise")), range(4))
    by_index = {r["index"]: r for r in records(out)}
    for i, s in enumerate(batch.samples):
        assert by_index[i]["params"] == batch.params[i]
        assert by_index[i]["preprocess"] == {"resize": 30, "interpolation": "lanczos", "crop": [24, 20]}
        np.testing.assert_array_equal(load_image(out / by_index[i]["output"]), s.image)
    assert "protocol" not in by_index[0]


def test_webp_and_quality_and_the_older_names(tmp_path):
    generate("_test_tiny", ["_test_noise"], [1], tmp_path / "w", limit=2, image_format="webp", quality=70)
    r = records(tmp_path / "w")[0]
    assert r["output"].endswith(".webp") and r["format"] == "webp (lossy, quality 70)"
    with Image.open(tmp_path / "w" / r["output"]) as img:
        assert img.format == "WEBP"
    assert json.loads((tmp_path / "w" / "generate.json").read_text())["quality"] == 70
    # fmt / jpeg_quality, the older names, still work and write what they wrote
    generate("_test_tiny", ["_test_noise"], [1], tmp_path / "j", limit=2, fmt="jpeg", jpeg_quality=80)
    generate("_test_tiny", ["_test_noise"], [1], tmp_path / "k", limit=2, image_format="jpeg", quality=80)
    a, b = records(tmp_path / "j"), records(tmp_path / "k")
    assert a == b and a[0]["format"] == "jpeg (lossy, quality 80)"
    assert (tmp_path / "j" / a[0]["output"]).read_bytes() == (tmp_path / "k" / b[0]["output"]).read_bytes()


def test_cli_prints_the_expected_size_first_and_takes_the_options(tmp_path, capsys):
    root = write_folder(tmp_path / "val")
    code = main(["generate", "--dataset", str(root), "--shift", "gaussian_noise", "--severity", "3",
                 "--protocol", "imagenet-c", "--out", str(tmp_path / "c")])
    text = capsys.readouterr().out
    assert code == 0
    assert text.index("generate: 5 image(s) x 1 shift(s) x 1 severity = 5 files, about") < text.index("wrote 5 outputs")
    assert (tmp_path / "c" / "gaussian_noise" / "3" / "n01440764" / "ILSVRC2012_val_00000293.JPEG").is_file()
    code = main(["generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--limit", "2", "--resize", "30",
                 "--crop", "24,20", "--image-format", "webp", "--quality", "60", "--out", str(tmp_path / "d")])
    assert code == 0
    r = records(tmp_path / "d")[0]
    assert r["preprocess"]["crop"] == [24, 20] and r["format"] == "webp (lossy, quality 60)"
    assert main(["generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--crop", "big",
                 "--out", str(tmp_path / "e")]) == 2
    assert "--crop 'big': expected SIZE or HEIGHT,WIDTH" in capsys.readouterr().err
