"""Compiled kernels of the corruptions (numba, cache=True; imported lazily, never by ``import shiftbench``).

Each is here because measurement showed numpy / OpenCV could not do the job as fast:

- glass_blur's shuffle. The reference means to swap every interior pixel with a random
  neighbour, scanning rows bottom-up and columns right-to-left. Its swap
  ``x[h, w], x[h', w'] = x[h', w'], x[h, w]`` acts on numpy views of the same array, so it really
  copies: ``x[h, w] = x[h', w']`` and the neighbour keeps its value. We reproduce that copy (it is
  what every ImageNet-C number measured). A source pixel rewritten earlier in the scan carries
  its new value on, so the copies chain and do not commute: a vectorised gather gives a different
  displacement distribution. The loop stays sequential: a few ns per pixel instead of ~10 us.
- the noise sampler: one loop over a packed alias table, 0.15 ms instead of about 1 ms for the
  seven numpy passes it replaces (shift, index, two gathers, compare, select, cast).
- fog's diamond-square: 0.2 ms instead of 0.75 ms for numpy's strided wrap-around slices.
- pixelate's BOX downscale in Pillow's fixed-point arithmetic (bit-exact), without Pillow's
  image copies.
- brightness, contrast and saturate as one pass each over the pixels with their tables (the max over
  channels, the table reads and the float32 arithmetic fused): 3-5x faster than the numpy / OpenCV
  passes they replace, same bytes (benchmarks/peers.py, docs/corruptions.md).

First use in a process loads them from numba's cache (about 0.3 s in all); the very first run on
a machine compiles them (a few seconds).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def shuffle_in_place(image: np.ndarray, raw: np.ndarray, delta: int, iterations: int) -> None:  # pragma: no cover - compiled
    """Apply the reference's copies, scanning rows H-delta..delta+1 and columns W-delta..delta+1.

    Copy number c (in scan order, all iterations) takes its (dx, dy) from 16-bit words 2c and
    2c+1, word k being bits 16*(k%4).. of ``raw[k//4]``; a word w maps to ``(w * 2d >> 16) - d``,
    uniform on [-d, d-1] (exactly for d = 1, 2, 4; within 1e-4 relative for d = 3).
    """
    height, width, channels = image.shape
    span = 2 * delta
    k = 0
    for it in range(iterations):
        for h in range(height - delta, delta, -1):
            for w in range(width - delta, delta, -1):
                wx = (raw[k >> 2] >> np.uint64(16 * (k & 3))) & np.uint64(0xFFFF)
                k += 1
                wy = (raw[k >> 2] >> np.uint64(16 * (k & 3))) & np.uint64(0xFFFF)
                k += 1
                wp = w + ((np.int64(wx) * span) >> 16) - delta
                hp = h + ((np.int64(wy) * span) >> 16) - delta
                for c in range(channels):
                    image[h, w, c] = image[hp, wp, c]


@numba.njit(cache=True, nogil=True)
def build_alias(pmf: np.ndarray, thresholds: np.ndarray, aliases: np.ndarray) -> None:  # pragma: no cover - compiled
    """Vose's alias tables for each row of ``pmf`` (threshold scaled to 24 bits)."""
    rows, n = pmf.shape
    one = 1 << 24
    small = np.empty(n, dtype=np.int64)
    large = np.empty(n, dtype=np.int64)
    for v in range(rows):
        total = pmf[v].sum()
        scaled = pmf[v] * (n / total)
        prob = np.ones(n)
        ns = 0
        nl = 0
        for j in range(n):
            aliases[v, j] = j
            if scaled[j] < 1.0:
                small[ns] = j
                ns += 1
            else:
                large[nl] = j
                nl += 1
        while ns > 0 and nl > 0:
            ns -= 1
            s = small[ns]
            nl -= 1
            g = large[nl]
            prob[s] = scaled[s]
            aliases[v, s] = g
            scaled[g] -= 1.0 - scaled[s]
            if scaled[g] < 1.0:
                small[ns] = g
                ns += 1
            else:
                large[nl] = g
                nl += 1
        for j in range(n):
            t = np.round(prob[j] * one)
            thresholds[v, j] = min(np.int64(t), one)


@numba.njit(cache=True, nogil=True)
def alias_sample(values: np.ndarray, raw: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Walker alias draw per value from 32-bit halves of 64-bit words (low half first).

    ``table[v*256 + j]`` packs (keep threshold << 8) | alias. The column j is the word's top
    8 bits; it is kept when the low 24 bits are below the threshold, else the alias is taken.
    """
    for i in range(values.size):
        r = raw[i >> 1]
        word = np.uint32(r >> np.uint64(32)) if (i & 1) else np.uint32(r & np.uint64(0xFFFFFFFF))
        column = word >> 24
        entry = table[(np.uint32(values[i]) << 8) | column]
        out[i] = column if (word & 0xFFFFFF) < (entry >> 8) else (entry & 0xFF)


@numba.njit(cache=True, nogil=True)
def diamond_square(size: int, decay: float, uniforms: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """The reference's diamond-square height map (before normalisation), one point at a time.

    Each level sets square centres, then left edges, then top edges, with wrap-around neighbours
    and a perturbation ``wibble**2 * U(-1, 1)`` taken from ``uniforms`` (in [0, 1)) in that order.
    """
    grid = np.zeros((size, size), dtype=np.float32)
    step = size
    wibble = 100.0
    k = 0
    while step >= 2:
        half = step // 2
        n = size // step
        amp = np.float32(wibble * wibble)
        for i in range(n):
            i1 = (i + 1) % n
            for j in range(n):
                j1 = (j + 1) % n
                s = grid[i * step, j * step] + grid[i1 * step, j * step] + grid[i * step, j1 * step] + grid[i1 * step, j1 * step]
                grid[i * step + half, j * step + half] = s * np.float32(0.25) + (uniforms[k] * np.float32(2.0) - np.float32(1.0)) * amp
                k += 1
        for i in range(n):
            im = (i - 1) % n
            for j in range(n):
                j1 = (j + 1) % n
                s = (grid[i * step + half, j * step + half] + grid[im * step + half, j * step + half]
                     + grid[i * step, j * step] + grid[i * step, j1 * step])
                grid[i * step, j * step + half] = s * np.float32(0.25) + (uniforms[k] * np.float32(2.0) - np.float32(1.0)) * amp
                k += 1
        for i in range(n):
            i1 = (i + 1) % n
            for j in range(n):
                jm = (j - 1) % n
                s = (grid[i * step + half, j * step + half] + grid[i * step + half, jm * step + half]
                     + grid[i * step, j * step] + grid[i1 * step, j * step])
                grid[i * step + half, j * step] = s * np.float32(0.25) + (uniforms[k] * np.float32(2.0) - np.float32(1.0)) * amp
                k += 1
        step //= 2
        wibble /= decay
    return grid


@numba.njit(cache=True, nogil=True)
def _clamp8(v: int) -> int:  # pragma: no cover - compiled
    return 0 if v < 0 else (255 if v > 255 else v)


@numba.njit(cache=True, nogil=True)
def resample_columns(image: np.ndarray, starts: np.ndarray, counts: np.ndarray, coeffs: np.ndarray,
                     out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Horizontal pass of Pillow's 8-bit resampling for an (H, W, 3) uint8 image.

    Output column x sums ``image[:, starts[x] + t] * coeffs[x, t]`` over its ``counts[x]`` taps
    (22-bit fixed point) from a rounding offset of 2**21, shifts right by 22 and clamps.
    """
    for y in range(image.shape[0]):
        for x in range(starts.size):
            s = starts[x]
            a0 = np.int32(1 << 21)
            a1 = np.int32(1 << 21)
            a2 = np.int32(1 << 21)
            for t in range(counts[x]):
                k = coeffs[x, t]
                a0 += np.int32(image[y, s + t, 0]) * k
                a1 += np.int32(image[y, s + t, 1]) * k
                a2 += np.int32(image[y, s + t, 2]) * k
            out[y, x, 0] = _clamp8(a0 >> 22)
            out[y, x, 1] = _clamp8(a1 >> 22)
            out[y, x, 2] = _clamp8(a2 >> 22)


@numba.njit(cache=True, nogil=True)
def resample_lines(image: np.ndarray, starts: np.ndarray, counts: np.ndarray, coeffs: np.ndarray,
                   out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Vertical pass of the same arithmetic on (H, W*3) rows: whole rows at a time (vectorised)."""
    width = image.shape[1]
    acc = np.empty(width, dtype=np.int32)
    for y in range(starts.size):
        acc[:] = 1 << 21
        for t in range(counts[y]):
            k = coeffs[y, t]
            row = image[starts[y] + t]
            for i in range(width):
                acc[i] += np.int32(row[i]) * k
        for i in range(width):
            out[y, i] = _clamp8(acc[i] >> 22)


@numba.njit(cache=True, nogil=True)
def brightness_pass(image: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """brightness in one pass: each channel c of a pixel becomes ``table[(max channel << 8) | c]``
    (the 256x256 table of the reference's HSV arithmetic)."""
    h, w, _ = image.shape
    for y in range(h):
        for x in range(w):
            r = np.int64(image[y, x, 0])
            g = np.int64(image[y, x, 1])
            b = np.int64(image[y, x, 2])
            v = max(r, max(g, b)) << 8
            out[y, x, 0] = table[v | r]
            out[y, x, 1] = table[v | g]
            out[y, x, 2] = table[v | b]


@numba.njit(cache=True, nogil=True)
def saturate_pass(image: np.ndarray, factors: np.ndarray, grey: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """saturate in one pass: each channel moves to V - (V - ch) * factor, the factor read from
    ``factors[(V << 8) | (V - min)]`` (S'V / (V - min) in float32, tabulated once per severity); a grey
    pixel takes ``grey[V]`` in its green and blue channels (hue 0 when the offset is positive)."""
    zero = np.float32(0.0)
    top = np.float32(255.0)
    flat = image.reshape(-1, 3)
    dst = out.reshape(-1, 3)
    for i in range(flat.shape[0]):
        r = np.int64(flat[i, 0])
        g = np.int64(flat[i, 1])
        b = np.int64(flat[i, 2])
        v = max(max(r, g), b)
        spread = v - min(min(r, g), b)
        value = np.float32(v)
        if spread > 0:
            factor = factors[(v << 8) | spread]
            o0 = value - (value - np.float32(r)) * factor
            o1 = value - (value - np.float32(g)) * factor
            o2 = value - (value - np.float32(b)) * factor
            dst[i, 0] = np.uint8(min(max(o0, zero), top))
            dst[i, 1] = np.uint8(min(max(o1, zero), top))
            dst[i, 2] = np.uint8(min(max(o2, zero), top))
        else:
            dst[i, 0] = flat[i, 0]
            dst[i, 1] = grey[v]
            dst[i, 2] = grey[v]


@numba.njit(cache=True, nogil=True)
def contrast_pass(image: np.ndarray, means: np.ndarray, c: float, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """contrast in one pass: a 256-entry table per channel in the reference's float64 arithmetic,
    uint8((clip((v / 255 - mean) * c + mean, 0, 1)) * 255), then three table reads per pixel."""
    table = np.empty((3, 256), dtype=np.uint8)
    for ch in range(3):
        for v in range(256):
            t = (v / 255.0 - means[ch]) * c + means[ch]
            t = min(max(t, 0.0), 1.0)
            table[ch, v] = np.uint8(t * 255.0)
    t0 = table[0]
    t1 = table[1]
    t2 = table[2]
    h, w, _ = image.shape
    for y in range(h):
        for x in range(w):
            out[y, x, 0] = t0[image[y, x, 0]]
            out[y, x, 1] = t1[image[y, x, 1]]
            out[y, x, 2] = t2[image[y, x, 2]]
