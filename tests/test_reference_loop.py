"""shiftbench evaluate gives, sample for sample, what a plain loop written the way timm and open_clip document it
gives: the library's transform, a torch DataLoader, argmax and top-5; open_clip's zero-shot recipe (80 templates,
the normalised mean of normalised text features, the logit scale). On an image folder a user would bring (JPEG and
PNG, RGB, grey, RGBA and palette files of many sizes) and on the same folder corrupted by ``shiftbench generate
--protocol imagenet-c`` and read back. The models are real (timm's ResNet ``test_resnet``, an open_clip ViT),
random-init under a fixed seed, loaded from local files through the adapters' local paths.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
open_clip = pytest.importorskip("open_clip")
tv_datasets = pytest.importorskip("torchvision.datasets")

from PIL import Image  # noqa: E402

from shiftbench.cli import main  # noqa: E402
from shiftbench.models.labels import imagenet_classes, imagenet_templates  # noqa: E402
from shiftbench.results.store import Store  # noqa: E402
from tiny_hub import save_tiny_open_clip, save_tiny_timm  # noqa: E402

WNIDS = ("n01440764", "n02123045", "n04037443")  # tench, tabby cat, racer
SIZES = ((97, 143), (300, 200), (64, 64), (333, 500), (181, 240))
MODES = ("RGB", "L", "RGBA", "P", "RGB")


def write_folder(root: Path) -> Path:
    """3 classes x 5 files: JPEG and PNG, RGB / grey / RGBA / palette, portrait and landscape, smooth content with
    texture (so that resizing matters) from a fixed seed."""
    rng = np.random.default_rng(7)
    for c, wnid in enumerate(WNIDS):
        (root / wnid).mkdir(parents=True)
        for k, ((h, w), mode) in enumerate(zip(SIZES, MODES)):
            yy, xx = np.mgrid[0:h, 0:w]
            base = np.stack([(xx * (c + 1) * 255 // w), (yy * 255 // h), ((xx + yy) * 3) % 256], -1)
            pixels = np.clip(base + rng.integers(-40, 40, (h, w, 3)), 0, 255).astype(np.uint8)
            image = Image.fromarray(pixels)
            if mode == "L":
                image = image.convert("L")
            elif mode == "RGBA":
                image = Image.fromarray(np.dstack([pixels, rng.integers(0, 256, (h, w), dtype=np.uint8)]), "RGBA")
            elif mode == "P":
                image = image.convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
            suffix = ".jpg" if mode in ("RGB", "L") and k % 2 == 0 else ".png"
            image.save(root / wnid / f"img{k}{suffix}", quality=90) if suffix == ".jpg" else image.save(root / wnid / f"img{k}{suffix}")
    return root


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return write_folder(tmp_path_factory.mktemp("ref") / "photos")


def _evaluate(tmp: Path, dataset: Path, model: str, name: str) -> dict[str, dict]:
    """Run ``shiftbench evaluate`` through the CLI with per-sample predictions; {sample id: prediction}."""
    spec = tmp / f"{name}.yaml"
    spec.write_text(f"dataset: {dataset}\nmodels: ['{model}']\nshifts: [clean]\nmetrics: [top1, top5]\n"
                    "batch_size: 4\nseed: 0\nlog_samples: true\n")
    db = tmp / f"{name}.db"
    assert main(["evaluate", "--config", str(spec), "--store", str(db)]) == 0
    store = Store(str(db))
    (run,) = store.runs()
    return {p["sample_id"]: p["prediction"] for p in store.predictions(run["run_id"])}


def _reference(root: Path, transform, logits_of) -> dict[str, tuple[int, list[int]]]:
    """The documented loop: torchvision's ImageFolder (PIL, convert RGB), the library's transform, a DataLoader,
    argmax and top-5 over the 1,000 ImageNet outputs; {relative path: (top-1, top-5)}."""
    data = tv_datasets.ImageFolder(str(root), transform=transform)
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=False, num_workers=0)
    out, paths = [], [Path(p).relative_to(root).as_posix() for p, _ in data.samples]
    with torch.no_grad():
        for x, _ in loader:
            logits = logits_of(x)
            out += [(int(row.argmax()), [int(i) for i in row.topk(5).indices]) for row in logits]
    return dict(zip(paths, out))


def _compare(ours: dict[str, dict], theirs: dict[str, tuple[int, list[int]]]) -> None:
    assert sorted(ours) == sorted(theirs)
    for sid, (top1, top5) in theirs.items():
        assert ours[sid]["pred"] == top1, sid
        assert ours[sid]["top5"] == top5, sid
        wnid = sid.split("/")[0]
        assert ours[sid]["label"] == [c.wnid for c in imagenet_classes()].index(wnid)


@pytest.fixture(scope="module")
def timm_folder(tmp_path_factory) -> Path:
    return save_tiny_timm(tmp_path_factory.mktemp("timm") / "test_resnet", seed=3)


def _timm_reference(folder: Path):
    model = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    config = timm.data.resolve_data_config({}, model=model)
    return model, timm.data.create_transform(**config)


def test_timm_clean_predictions_equal_a_reference_loop(photos, timm_folder, tmp_path):
    ours = _evaluate(tmp_path, photos, f"timm:{timm_folder}", "timm_clean")
    model, transform = _timm_reference(timm_folder)
    _compare(ours, _reference(photos, transform, model))


def test_timm_on_a_generated_imagenet_c_folder_equals_a_reference_loop(photos, timm_folder, tmp_path):
    out = tmp_path / "photos-c"
    assert main(["generate", "--dataset", str(photos), "--shift", "gaussian_noise,fog", "--severity", "3",
                 "--protocol", "imagenet-c", "--out", str(out)]) == 0
    model, transform = _timm_reference(timm_folder)
    for corruption in ("gaussian_noise", "fog"):
        folder = out / corruption / "3"
        assert len(list(folder.rglob("*.jpg"))) + len(list(folder.rglob("*.JPEG"))) == 15
        ours = _evaluate(tmp_path, folder, f"timm:{timm_folder}", f"timm_{corruption}")
        _compare(ours, _reference(folder, transform, model))


def test_open_clip_zero_shot_equals_the_documented_recipe(photos, tmp_path):
    arch, weights = save_tiny_open_clip(tmp_path / "clip", seed=5)
    ours = _evaluate(tmp_path, photos, f"open_clip:{arch}//{weights}", "clip_clean")

    model, _, transform = open_clip.create_model_and_transforms(arch, pretrained=str(weights))
    model.eval()
    tokenizer = open_clip.get_tokenizer(arch)
    names, templates = [c.name for c in imagenet_classes()], imagenet_templates()
    with torch.no_grad():
        weights_zs = []
        for name in names:
            text = model.encode_text(tokenizer([t.format(name) for t in templates]))
            mean = torch.nn.functional.normalize(text, dim=-1).mean(dim=0)
            weights_zs.append(mean / mean.norm())
        classifier = torch.stack(weights_zs, dim=1)

    def logits_of(x):
        feats = torch.nn.functional.normalize(model.encode_image(x), dim=-1)
        return model.logit_scale.exp() * feats @ classifier

    _compare(ours, _reference(photos, transform, logits_of))
