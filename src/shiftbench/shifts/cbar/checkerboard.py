"""ImageNet-C-bar's checkerboard_cutout: grey squares cut out of a rotated checkerboard."""

from __future__ import annotations

import numpy as np

from ...registry import SHIFTS
from ._base import CBarCorruption, draw_seed32, float_parameter

__all__ = ["CheckerboardCutout", "cutout_grid", "cutout_mask"]

_GREY = 128


def cutout_grid(shape: tuple[int, int], scales, fraction: float, seed: int) -> np.ndarray:
    """The reference's grid of cut cells: ``RandomState(seed).uniform(size=(G0, G1)) < fraction`` with
    G_k = int(4 * L // scales[k]), L the longer side (the image side on a square image)."""
    side = max(shape[:2])
    size = (int(4 * side // float(scales[0])), int(4 * side // float(scales[1])))
    return np.random.RandomState(seed=int(seed)).uniform(size=size) < fraction


def cutout_mask(shape: tuple[int, int], scales, angle: float, grid: np.ndarray) -> np.ndarray:
    """The H x W boolean mask of grey pixels (True: cut out), the module's formula in float64."""
    h, w = shape[:2]
    s0, s1 = float(scales[0]), float(scales[1])
    cos, sin = np.cos(angle), np.sin(angle)
    y = np.arange(h, dtype=np.float64)[:, None]
    x = np.arange(w, dtype=np.float64)[None, :]
    nx = cos * y + sin * x
    nx /= s0
    ny = -sin * y + cos * x
    ny /= s1
    same_parity = np.remainder(nx, 2).astype(np.int64) == np.remainder(ny, 2).astype(np.int64)
    # int() truncates towards zero and a negative index counts from the end, as Python's indexing does
    ix = nx.astype(np.int64)
    iy = ny.astype(np.int64)
    ix[ix < 0] += grid.shape[0]
    iy[iy < 0] += grid.shape[1]
    return same_parity & grid[ix, iy]


@SHIFTS.register("checkerboard_cutout", description="Grey cells cut from a rotated checkerboard (ImageNet-C-bar)",
                 group="cbar")
class CheckerboardCutout(CBarCorruption):
    """Checkerboard cutout (ImageNet-C-bar): cells of a rotated checkerboard, chosen at random, painted grey.

    The pixel at row y, column x has rotated cell coordinates

        nx = (cos(angle) y + sin(angle) x) / scales[0],    ny = (-sin(angle) y + cos(angle) x) / scales[1]

    and becomes grey (128, 128, 128) when int(nx mod 2) == int(ny mod 2) (the "black" squares) and
    ``grid[int(nx), int(ny)]``, where grid = ``RandomState(seed).uniform(size=(G0, G1)) < fraction``,
    G_k = int(4 * S // scales[k]). As in the reference, int() truncates towards zero (the cells on either
    side of nx = 0 share grid row 0) and a negative index counts from the end of the grid (row -1 is row
    G0 - 1): the parity uses floored cells, the grid truncated ones. Every other pixel is kept.

    ``scales`` = (s, s), s = max(1, uniform(0.1, 0.25) * S); ``angle`` uniform in [0, 2 pi).
    Severities 1..5 are levels 2..6: ``fraction`` (the chance a black cell is cut) 0.2, 0.3, 0.4, 0.5, 0.6.

    Params (the reference's record): ``angle``, ``scales`` ([s, s]), ``fraction``, ``seed`` (for
    ``RandomState``, which draws the grid).

    Non-square images: the cell size from the shorter side (s = max(1, u * min(H, W))); the grid size
    from the longer side (G_k = int(4 * max(H, W) // scales[k])), so that it holds every rotated cell of
    the image, negative ones included: |nx|, |ny| <= sqrt(H^2 + W^2) / s < G_k. On a square image both are
    the reference's im_size.
    """

    def sample_parameters(self, shape, level, rng):
        h, w = shape[:2]
        angle = float(rng.uniform(0.0, 2 * np.pi))
        scale = float(max(rng.uniform(0.1, 0.25) * min(h, w), 1.0))
        return {"angle": angle, "scales": [scale, scale], "fraction": float_parameter(level, 1.0),
                "seed": draw_seed32(rng)}

    def transform(self, image, params):
        grid = cutout_grid(image.shape, params["scales"], float(params["fraction"]), params["seed"])
        cut = cutout_mask(image.shape, params["scales"], float(params["angle"]), grid)
        out = image.copy()
        out[cut] = _GREY
        return out

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, _, h, w = x.shape
        dev = x.device
        grids = [cutout_grid((h, w), p["scales"], float(p["fraction"]), p["seed"]) for p in params]
        g0 = max(g.shape[0] for g in grids)
        g1 = max(g.shape[1] for g in grids)
        padded = np.zeros((n, g0, g1), dtype=bool)
        for j, g in enumerate(grids):
            padded[j, : g.shape[0], : g.shape[1]] = g
        sizes = torch.as_tensor([g.shape for g in grids], device=dev, dtype=torch.int64)  # (N, 2)
        # the rotation in float64, as the numpy path: same operations, same bits
        angles = np.array([float(p["angle"]) for p in params])
        cos = torch.as_tensor(np.cos(angles), device=dev).view(n, 1, 1)
        sin = torch.as_tensor(np.sin(angles), device=dev).view(n, 1, 1)
        scales = torch.as_tensor([[float(v) for v in p["scales"]] for p in params], device=dev, dtype=torch.float64)
        y = torch.arange(h, device=dev, dtype=torch.float64).view(1, h, 1)
        xs = torch.arange(w, device=dev, dtype=torch.float64).view(1, 1, w)
        nx = (cos * y + sin * xs) / scales[:, 0].view(n, 1, 1)
        ny = (-sin * y + cos * xs) / scales[:, 1].view(n, 1, 1)
        same_parity = torch.remainder(nx, 2).to(torch.int64) == torch.remainder(ny, 2).to(torch.int64)
        ix = nx.to(torch.int64)  # truncation towards zero, negative indices from the end
        iy = ny.to(torch.int64)
        ix = torch.where(ix < 0, ix + sizes[:, 0].view(n, 1, 1), ix)
        iy = torch.where(iy < 0, iy + sizes[:, 1].view(n, 1, 1), iy)
        cells = torch.from_numpy(padded).to(dev).view(n, g0 * g1)
        cut = same_parity & cells.gather(1, (ix * g1 + iy).view(n, h * w)).view(n, h, w)
        return torch.where(cut.unsqueeze(1), torch.full_like(x, _GREY), x)
