"""Protocol helpers: label spaces, declared preprocessing, output and label-space checks, lazy registration."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.models import LabelSpace, Preprocess, check_label_space, check_outputs
from shiftbench.models.labels import imagenet_classes, imagenet_templates


def test_registering_and_listing_models_does_not_import_torch():
    code = (
        "import sys, shiftbench as sb; names = sb.list_models(); m = sb.create_model('dummy_classifier');"
        "m.predict_logits([__import__('numpy').zeros((8, 8, 3), 'uint8')]); sb.list_metrics();"
        "print(sorted(k for k in ('torch', 'onnxruntime', 'transformers', 'sentence_transformers') if k in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_registry_lists_the_issue_models_with_tasks():
    names = sb.list_models()
    for name in ["efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "u2netp", "dummy_classifier",
                 "dummy_segmenter", "dummy_detector", "dummy_captioner", "timm:", "open_clip:", "hf:"]:
        assert name in names
    assert sb.MODELS.entry("u2netp").meta["task"] == "segmentation"
    with pytest.raises(ShiftbenchError, match="did you mean"):
        sb.create_model("efficientnet_lite9")


def test_imagenet_tables():
    table = imagenet_classes()
    assert len(table) == 1000 and len({c.wnid for c in table}) == 1000
    assert [c.wnid for c in table] == sorted(c.wnid for c in table)  # the standard output order
    assert table[0].name == "tench" and table[285].wnid == "n02124075"
    templates = imagenet_templates()
    assert len(templates) == 80 and len(set(templates)) == 80 and all("{}" in t for t in templates)
    space = LabelSpace.imagenet1k()
    assert space.num_classes == 1000 and space.index("n02123045") == space.index("tabby cat") == 281


def test_preprocess_tf_recipe_geometry_and_normalisation():
    p = Preprocess(size=(224, 224), mean=(127, 127, 127), std=(128, 128, 128), crop_fraction=224 / 256,
                   value_range=255.0, recipe="tf")
    # a 300x400 image: the model sees the central 262x262 square (224/256 of the shorter side)
    top, left, h, w = p.crop_box(300, 400)
    assert (h, w) == (262, 262) and (top, left) == (19, 69)
    image = np.zeros((300, 400, 3), np.uint8)
    image[top:top + h, left:left + w] = 255  # only the crop region is white
    x = p([image])
    assert x.shape == (1, 3, 224, 224) and x.dtype == np.float32
    assert np.allclose(x, (255 - 127) / 128, atol=1e-6)  # nothing outside the crop leaks in
    # BGR order flips channels; value_range 1 divides by 255
    q = Preprocess(size=(4, 4), mean=(0, 0, 0), std=(1, 1, 1), resize="exact", color_order="BGR", value_range=1.0)
    img = np.zeros((4, 4, 3), np.uint8)
    img[..., 0] = 255
    assert np.allclose(q([img])[0, 2], 1.0) and np.allclose(q([img])[0, 0], 0.0)
    json.dumps(p.to_dict())


def test_check_outputs_and_label_space():
    with pytest.raises(ShiftbenchError, match="NaN/inf"):
        check_outputs(np.array([[0.0, np.inf]]), "m")
    with pytest.raises(ShiftbenchError, match="label space has 3"):
        check_outputs(np.zeros((2, 4)), "m", num_classes=3)
    with pytest.raises(ShiftbenchError, match="for 3 images"):
        check_outputs([np.zeros(2)] * 2, "m", batch_size=3)
    model = sb.create_model("dummy_classifier")  # imagenet1k
    check_label_space(model, "imagenet1k")
    check_label_space(model, LabelSpace.imagenet1k())
    with pytest.raises(ShiftbenchError, match="imagenet1k"):
        check_label_space(model, ["cat", "dog"])
    with pytest.raises(ShiftbenchError, match="voc21"):
        check_label_space(model, "voc21")
    check_label_space(sb.create_model("dummy_segmenter"), "voc21")  # class-agnostic fits any dataset
