"""The generic registry: decorator and lazy entries, schemes, glob listing, did-you-mean."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shiftbench.errors import ShiftbenchError, UnknownNameError
from shiftbench.registry import Registry


def make() -> Registry:
    reg = Registry("thing")

    @reg.register("gaussian_noise", description="noise", group="noise")
    class Noise:
        def __init__(self, amount: float = 1.0):
            self.amount = amount

    @reg.register("motion_blur")
    def motion_blur(length: int = 3):
        """Blur along a line."""
        return ("blur", length)

    reg.add_lazy("json_dumps", "json:dumps", description="lazy", heavy=True)
    reg.add_scheme("fake", lambda rest, **kw: ("fake", rest, kw), description="scheme")
    return reg


def test_register_and_create():
    reg = make()
    obj = reg.create("gaussian_noise", amount=2.0)
    assert obj.amount == 2.0
    assert reg.create("motion_blur", length=5) == ("blur", 5)
    assert reg.entry("motion_blur").description == "Blur along a line."
    assert reg.entry("gaussian_noise").meta == {"group": "noise"}
    assert type(obj).name == "gaussian_noise"


def test_lazy_entry_resolves_on_use():
    reg = make()
    entry = reg.entry("json_dumps")
    assert entry.lazy
    assert reg.get("json_dumps")({"a": 1}) == '{"a": 1}'
    assert not entry.lazy


def test_scheme_names():
    reg = make()
    assert reg.create("fake:some/model", x=1) == ("fake", "some/model", {"x": 1})
    assert "fake:anything" in reg
    assert "other:anything" not in reg


def test_glob_and_substring_listing():
    reg = make()
    assert reg.names("*blur*") == ["motion_blur"]
    assert reg.names("noise") == ["gaussian_noise"]
    assert reg.names() == ["fake:", "gaussian_noise", "json_dumps", "motion_blur"]
    assert reg.names("nothing*") == []


def test_unknown_name_suggests():
    reg = make()
    with pytest.raises(UnknownNameError) as err:
        reg.create("gausian_noise")
    message = str(err.value)
    assert "did you mean 'gaussian_noise'" in message
    assert "Available:" in message and "motion_blur" in message
    assert isinstance(err.value, ShiftbenchError)


def test_bad_parameters_named():
    reg = make()
    with pytest.raises(ShiftbenchError, match=r"accepted parameters: amount"):
        reg.create("gaussian_noise", amunt=3)


def test_duplicate_registration_refused():
    reg = make()
    with pytest.raises(ValueError, match="registered twice"):
        reg.add("motion_blur", object())


def test_listing_does_not_import_heavy_backends():
    code = (
        "import sys, shiftbench as sb\n"
        "for kind in (sb.SHIFTS, sb.MODELS, sb.DATASETS, sb.METRICS): kind.names()\n"
        "heavy = [m for m in ('torch', 'diffusers', 'transformers', 'onnxruntime', 'ray') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
