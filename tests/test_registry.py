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


def test_option_groups_name_what_double_star_keywords_take():
    """A factory parsing its ``**`` keywords into dataclasses (``option_groups``) has their fields checked as its
    own: accepted, and listed (after its named parameters) when a name is refused."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Reading:
        on_error: str = "fail"
        verify: str = "header"

    reg = Registry("thing")

    @reg.register("reader")
    class Reader:
        option_groups = (Reading,)

        def __init__(self, root: str = ".", **reading: str):
            self.root, self.reading = root, Reading(**reading)

    assert reg.create("reader", verify="full").reading == Reading(verify="full")
    with pytest.raises(ShiftbenchError, match=r"unexpected keyword argument 'verfy'; accepted parameters: root, "
                                              r"on_error, verify$"):
        reg.create("reader", verfy="full")


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


def test_shift_and_metric_declarations_are_typed():
    """A shift's family (``group=``) and its class's role, a metric's task and direction: frozen infos read
    through the registry's accessors; a keyword no info has is refused at registration."""
    from dataclasses import FrozenInstanceError

    from shiftbench.registry import MetricInfo, ShiftInfo, family_members, metric_info, shift_info

    reg = Registry("shift", info=ShiftInfo.declared)
    reg.add("x", type("X", (), {"role": "corruption"}), group="noise")
    reg.add_lazy("y", "json:dumps", group="background", role="background", compose="color", contract=False)
    assert reg.entry("x").info == ShiftInfo(family="noise", role="corruption")
    assert reg.entry("y").info == ShiftInfo("background", "background", "color", contract=False)
    assert reg.entry("x").meta == {"group": "noise"}  # the keywords as given
    with pytest.raises(TypeError):
        reg.add("w", object(), colour="red")
    with pytest.raises(FrozenInstanceError):
        reg.entry("x").info.family = "blur"
    assert shift_info("fog") == ShiftInfo(family="weather", role="corruption")
    assert shift_info("text_swap").role == "text" and shift_info("text_swap").level == "char"
    assert shift_info("chain") == ShiftInfo(family="chain", contract=False)
    assert shift_info("adversarial_diffusion").source == ("classifier", "efficientnet_lite0")  # lazy: not imported
    assert shift_info("no_such_shift") == ShiftInfo() and shift_info("sparkles").family == "cbar"
    assert family_members("noise") == ["gaussian_noise", "impulse_noise", "shot_noise"]
    assert metric_info("ece") == MetricInfo(task="classification", higher_is_better=False)
    assert metric_info("rank") == MetricInfo(task="retrieval", higher_is_better=False)  # lazy
    assert metric_info(object()) == MetricInfo()  # a metric object without declarations: any task, higher better


def test_object_compose_families_are_declared_by_the_shifts():
    """ObjectCompose's families come from the background shifts' declarations, not from a list of names."""
    from shiftbench.registry import SHIFTS
    from shiftbench.report.objectcompose import FAMILY_ORDER, family_of

    declared = {e.name: e.info.compose for e in SHIFTS.entries() if e.info.compose}
    assert declared == {"adversarial_diffusion": "adversarial", "adversarial_texture": "adversarial",
                        "background_color": "color", "background_inpaint": "prompt", "background_only": "background_only",
                        "background_scene": "scene", "background_texture": "texture", "object_only": "object_only"}
    assert set(declared.values()) - {"prompt"} <= set(FAMILY_ORDER)
    assert family_of("background_scene", {"scene": "mixed_rand"}) == "mixed_rand"
    assert family_of("background_inpaint", {}) == "class_label" and family_of("chain", {}) is None
