"""The batched torch path of the corruptions against the numpy path (CPU here; the code is device-agnostic)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shiftbench.errors import ShiftbenchError  # noqa: E402
from shiftbench.registry import SHIFTS  # noqa: E402
from shiftbench.sample import Sample  # noqa: E402
from shiftbench.shifts.corruptions import CORRUPTION_GROUPS  # noqa: E402
from shiftbench.shifts.corruptions._torch import TORCH_CORRUPTIONS, _border_index  # noqa: E402


def photos(shape: tuple[int, int], count: int) -> list[np.ndarray]:
    """Real photographs (scikit-image's samples) resized to ``shape`` (H, W), each a different one."""
    import cv2
    from skimage import data

    loads = (data.astronaut, data.chelsea, data.coffee, data.rocket)
    return [np.ascontiguousarray(cv2.resize(loads[i % 4]()[..., :3], shape[::-1], interpolation=cv2.INTER_AREA))
            for i in range(count)]


def to_tensor(images: list[np.ndarray]):
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()


def to_numpy(x) -> np.ndarray:
    return x.permute(0, 2, 3, 1).cpu().numpy()


def test_every_corruption_has_a_torch_path():
    from shiftbench.shifts.cbar import CBAR_CORRUPTIONS

    assert set(TORCH_CORRUPTIONS) == set(CORRUPTION_GROUPS["all"]) | set(CBAR_CORRUPTIONS)  # ImageNet-C's and C-bar's


@pytest.mark.parametrize("name", CORRUPTION_GROUPS["all"])
def test_torch_path_equals_numpy_path(name):
    """Every severity (whole and in between), two sizes (one not square, one smaller than the motion streak), same params:
    the mean absolute difference per image stays under 1 grey level (measured: at most 0.07)."""
    shift = SHIFTS.create(name)
    for shape in ((40, 52), (72, 96)):
        images = photos(shape, 2)
        for severity in (1, 1.5, 2, 2.75, 3, 4, 4.25, 5):  # whole and in-between (continuous severities)
            params = [shift.draw(Sample(image=im, id=f"{name}-{i}"), severity, seed=3) for i, im in enumerate(images)]
            want = np.stack(shift.apply_images(images, params))
            got = to_numpy(shift.apply_tensor(to_tensor(images), params))
            assert got.dtype == np.uint8 and got.shape == want.shape
            mad = np.abs(got.astype(np.int16) - want.astype(np.int16)).reshape(len(images), -1).mean(axis=1)
            assert mad.max() < 1.0, (name, shape, severity, mad)


def test_exact_for_table_corruptions():
    """The table-driven corruptions and the tabulated noise are bit for bit the numpy path."""
    images = photos((64, 64), 3)
    for name in ("gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "brightness", "contrast",
                 "pixelate", "saturate", "jpeg_compression"):
        shift = SHIFTS.create(name)
        params = [shift.draw(Sample(image=im, id=str(i)), 4, seed=0) for i, im in enumerate(images)]
        got = to_numpy(shift.apply_tensor(to_tensor(images), params))
        np.testing.assert_array_equal(got, np.stack(shift.apply_images(images, params)), err_msg=name)


def test_mixed_severities_and_replayed_params():
    """A batch may mix severities; params recorded by a run (a JSON round trip) replay on tensors."""
    import json

    shift = SHIFTS.create("motion_blur")
    images = photos((48, 48), 4)
    params = [shift.draw(Sample(image=im, id=str(i)), 1 + i, seed=9) for i, im in enumerate(images)]
    params = json.loads(json.dumps(params))
    got = to_numpy(shift.apply_tensor(to_tensor(images), params))
    for im, p, g in zip(images, params, got):
        want = shift.replay(im, p)
        assert np.abs(g.astype(int) - want.astype(int)).mean() < 1.0
    assert not np.array_equal(got[0], got[1])


def test_output_stays_on_input_device_and_input_is_untouched():
    shift = SHIFTS.create("fog")
    images = photos((40, 40), 2)
    x = to_tensor(images)
    before = x.clone()
    params = [shift.draw(Sample(image=im, id=str(i)), 2) for i, im in enumerate(images)]
    out = shift.apply_tensor(x, params)
    assert out.device == x.device and out.dtype == torch.uint8 and out.shape == x.shape
    assert torch.equal(x, before)
    assert shift.apply_tensor(x[:0], []).shape == (0, 3, 40, 40)


def test_bad_tensors_are_refused_with_one_line():
    shift = SHIFTS.create("contrast")
    x = to_tensor(photos((40, 40), 1))
    p = [{"severity": 2}]
    with pytest.raises(ShiftbenchError, match="uint8 \\(N, 3, H, W\\)"):
        shift.apply_tensor(x.float(), p)
    with pytest.raises(ShiftbenchError, match="uint8 \\(N, 3, H, W\\)"):
        shift.apply_tensor(x[0], p)
    with pytest.raises(ShiftbenchError, match="at least 32x32"):
        shift.apply_tensor(x[..., :20, :], p)
    with pytest.raises(ShiftbenchError, match="1 images but 2 params"):
        shift.apply_tensor(x, p * 2)
    with pytest.raises(Exception, match="severity"):
        shift.apply_tensor(x, [{"severity": 9}])


@pytest.mark.parametrize("mode", ["replicate", "reflect101", "reflect"])
def test_border_index_matches_opencv(mode):
    import cv2

    flag = {"replicate": cv2.BORDER_REPLICATE, "reflect101": cv2.BORDER_REFLECT_101, "reflect": cv2.BORDER_REFLECT}[mode]
    row = np.arange(5, dtype=np.float32)[None, :]
    for before, after in ((2, 3), (7, 11)):
        want = cv2.copyMakeBorder(row, 0, 0, before, after, flag)[0].astype(np.int64)
        np.testing.assert_array_equal(_border_index(5, before, after, mode), want)
