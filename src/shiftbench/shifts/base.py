"""The Shift base classes: random draws (``sample_params``) kept apart from deterministic paint (``apply``).

Every random number a shift uses is drawn in ``sample_params`` from a generator seeded by
(seed, sample id, shift name), and returned as plain JSON data. ``apply`` is deterministic, so a
shifted sample can be rebuilt exactly from its recorded params (``shift.replay``).

A shift is called as ``shift(x, severity=s, seed=k)`` and returns the kind it was given: an ndarray
for an ndarray (HxWx3 uint8), a Sample for a Sample, a str for a str (text shifts), a Query for a
Query; a list gives a list, item by item as if called one at a time.

Sample ids and random streams. ``sample_id=`` names the record whose stream is drawn; a Sample or
Query uses its own ``id``. Without one, the id is derived from the content (``sample.content_id``: a
blake2b digest of the image's shape, dtype and bytes, or of the text): ``shift([a, b], seed=0)`` and a
loop of ``shift(img, seed=0)`` over a folder give every different image its own noise, and the same
image with the same seed gives the same bytes everywhere. Identical images in one list share a stream,
so a list still equals its items one by one. Datasets give every record a stable id (its path), so
the streams of a benchmark never depend on the pixels.
"""

from __future__ import annotations

import hashlib
import json
import numbers
from typing import Any, ClassVar, Sequence

import numpy as np

from ..errors import SeverityError, ShiftbenchError
from ..sample import Query, Sample, content_id, to_rgb_uint8
from ..seeds import check_seed
from ..severity import canonical, label
from .replay_params import check_replay_params, replay_failed

__all__ = ["Shift", "ImageShift", "TextShift", "make_rng", "derive_seed", "check_params"]


def derive_seed(seed: int, sample_id: str | None, shift_name: str) -> list[int]:
    """Entropy words for a per-sample generator: the seed plus a hash of (sample id, shift name).

    A stable hash (sha256) rather than Python's ``hash`` so that the same inputs give the same
    stream on every machine, process and worker. The seed is one already checked where it entered
    (seeds.py, ``0 <= seed < 2**63``): its two 32-bit words hold it whole, so distinct seeds give
    distinct words, and distinct streams.
    """
    key = f"{'' if sample_id is None else sample_id}\x1f{shift_name}".encode("utf-8")
    digest = hashlib.sha256(key).digest()
    words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
    return [seed & 0xFFFFFFFF, seed >> 32, *words]


# the id of a bare array shifted by a shift that draws nothing: no stream depends on it, and the
# caller gets the image back, not the Sample
UNHASHED_ID = "array"


def make_rng(seed: int, sample_id: str | None, shift_name: str) -> np.random.Generator:
    """The per-sample generator (PCG64, platform-independent) for a seed given by a caller (checked here)."""
    seed = check_seed(seed)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(derive_seed(seed, sample_id, shift_name))))


def check_params(params: Any, shift_name: str) -> dict[str, Any]:
    """Params must be a JSON-serialisable dict that survives a JSON round trip unchanged."""
    if not isinstance(params, dict):
        raise TypeError(f"shift {shift_name!r}: sample_params must return a dict, got {type(params).__name__}")
    try:
        text = json.dumps(params, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"shift {shift_name!r}: params are not JSON-serialisable ({exc})") from None
    if json.loads(text) != params:
        raise TypeError(f"shift {shift_name!r}: params change in a JSON round trip (use lists, not tuples)")
    return params


class Shift:
    """A named, registered transform of a Sample.

    Subclasses set ``severities`` (inclusive range), ``keeps`` (which annotations stay valid:
    any of "label", "mask", "boxes", "caption", "layout") and implement ``sample_params`` and
    ``apply``. Variant parameters (``create_shift("background_color", color="red")``) are the
    constructor's keyword arguments; they are recorded in ``config``.
    """

    name: ClassVar[str] = "shift"
    kind: ClassVar[str] = "image"  # "image", "sample" (needs a Sample with a mask) or "text"
    role: ClassVar[str] = "other"  # what it changes (registry ShiftInfo.role): corruption, text, background, ...
    severities: ClassVar[tuple[int, int]] = (1, 5)
    default_severity: ClassVar[int | None] = None
    # a dial: any real severity in the range (shiftbench.severity), not only whole ones
    continuous: ClassVar[bool] = False
    keeps: ClassVar[frozenset[str]] = frozenset({"label", "mask", "boxes", "caption", "layout"})
    requires: ClassVar[frozenset[str]] = frozenset()  # Sample fields needed, e.g. {"mask"}

    def __init__(self, **config: Any):
        if config:
            raise ShiftbenchError(f"shift {self.name!r} takes no parameters, got {sorted(config)}")
        self.config: dict[str, Any] = {}

    # -- to implement -------------------------------------------------------------------------
    def sample_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        """Draw every random number for this sample; return JSON-serialisable params."""
        return {}

    def apply(self, sample: Sample, params: dict[str, Any]) -> Sample:
        """Deterministically apply ``params`` to ``sample``; never modify the input in place."""
        raise NotImplementedError

    def apply_batch(self, samples: Sequence[Sample], params: Sequence[dict[str, Any]]) -> list[Sample]:
        """Apply to many samples; override to vectorise. Must equal ``apply`` item by item."""
        return [self.apply(s, p) for s, p in zip(samples, params)]

    # -- the call contract --------------------------------------------------------------------
    def check_severity(self, severity: float | None) -> int | float:
        """The severity as used and recorded (``severity.canonical``: whole ones are ints); None gives the
        default. A dial (``continuous``) takes any real number in its range, other shifts whole ones."""
        lo, hi = self.severities
        if severity is None:
            severity = self.default_severity if self.default_severity is not None else (lo if lo == hi else 3)
        kind = "a number" if self.continuous else "an integer"
        if isinstance(severity, bool) or not isinstance(severity, numbers.Real):
            raise SeverityError(f"shift {self.name!r}: severity must be {kind} in {lo}..{hi}, "
                                f"got {severity!r} ({type(severity).__name__})")
        value = canonical(severity, f"shift {self.name!r}: severity")
        if not lo <= value <= hi:
            raise SeverityError(f"shift {self.name!r}: severity {label(value)} is outside {lo}..{hi}")
        if not isinstance(value, int) and not self.continuous:
            raise SeverityError(f"shift {self.name!r}: severity must be an integer in {lo}..{hi} (this shift has "
                                f"no severities in between), got {label(value)}")
        return value

    def rng(self, seed: int, sample_id: str | None) -> np.random.Generator:
        """:func:`make_rng` for a seed already checked (by a public call, the spec or a policy)."""
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(derive_seed(seed, sample_id, self.name))))

    def draw(self, sample: Sample, severity: int | None = None, seed: int = 0) -> dict[str, Any]:
        """Params for ``sample`` under (severity, seed): what a manifest records. Checks both (the Python API)."""
        seed = check_seed(seed)  # before any work, and also for shifts that never build a generator
        return self.draw_parsed(sample, self.check_severity(severity), seed)

    def draw_parsed(self, sample: Sample, severity: int | float, seed: int) -> dict[str, Any]:
        """:meth:`draw` for a severity and seed parsed where they entered (the spec, ``generate``'s options, a
        policy, this shift's own call): taken as they are, per sample, never checked again."""
        self.check_sample(sample)
        params = self.sample_params(sample, severity, self.rng(seed, sample.id))
        return check_params(params, self.name)

    def check_sample(self, sample: Sample) -> None:
        for field_name in self.requires:
            if getattr(sample, field_name, None) is None:
                raise ShiftbenchError(f"shift {self.name!r} needs samples with a {field_name}; sample {sample.id} has none")

    def load_conditioning(self, sample: Sample) -> None:
        """Load what this shift needs to run on samples like ``sample`` (mask providers, captioners,
        pipelines; weights included) without running any of it, so that a missing file or package
        raises now the error the first real call would. ``shiftbench evaluate --dry-run`` and the
        runner's setup call it. Shifts without conditioning need nothing."""

    @property
    def uses_model(self) -> bool:
        """Whether this shift loads a model to run (a mask provider, a diffusion pipeline, a captioner).

        Engines run such shifts on long-lived workers (one model replica each, on a GPU where there is
        one) instead of short tasks, so the model loads once per worker. A shift that overrides
        ``load_conditioning`` is taken to load something; override this to say otherwise."""
        return type(self).load_conditioning is not Shift.load_conditioning

    @property
    def draws_randomly(self) -> bool:
        """Whether ``sample_params`` may use its generator. A bare array given without an id is hashed
        (``content_id``) to seed that generator; a shift that never draws skips the hash, which costs
        about as much as a point-wise corruption itself. Shifts that never draw override this."""
        return True

    def replay(self, x: Any, params: dict[str, Any]) -> Any:
        """Rebuild a shifted output from recorded params (same kind out as in).

        Params that are not this shift's (a key missing or unknown, a value of another JSON type than the
        shift draws) raise a ParamsError naming the key (shifts/replay_params.py), before any work; params of
        the right shape that ``apply`` still cannot use raise one naming the shift and the reason."""
        sample, unwrap = self._wrap(x, None)
        check_replay_params(self, sample, params)
        try:
            return unwrap(self.apply(sample, params))
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            if isinstance(exc, ShiftbenchError):
                raise
            raise replay_failed(self, exc) from exc

    def __call__(
        self,
        x: Any,
        severity: int | None = None,
        seed: int = 0,
        sample_id: str | None = None,
        return_params: bool = False,
    ) -> Any:
        seed, severity = check_seed(seed), self.check_severity(severity)  # parsed once for every item
        if isinstance(x, (list, tuple)):
            return self._call_batch(list(x), severity, seed, sample_id, return_params)
        sample, unwrap = self._wrap(x, sample_id)
        params = self.draw_parsed(sample, severity, seed)
        out = unwrap(self.apply(sample, params))
        return (out, params) if return_params else out

    def _call_batch(self, items: list[Any], severity, seed, sample_ids, return_params):
        if sample_ids is None or isinstance(sample_ids, str):
            sample_ids = [sample_ids] * len(items)
        if len(sample_ids) != len(items):
            raise ShiftbenchError(f"shift {self.name!r}: {len(items)} items but {len(sample_ids)} sample ids")
        wrapped = [self._wrap(x, sid) for x, sid in zip(items, sample_ids)]
        samples = [w[0] for w in wrapped]
        params = [self.draw_parsed(s, severity, seed) for s in samples]
        outs = [unwrap(o) for (_, unwrap), o in zip(wrapped, self.apply_batch(samples, params))]
        return (outs, params) if return_params else outs

    def _wrap(self, x: Any, sample_id: str | None):
        """Turn the input into a Sample and return a function that turns the output back."""
        if isinstance(x, Sample):
            if sample_id is not None:
                x = x.replace(id=str(sample_id))
            return x, lambda s: s
        if isinstance(x, np.ndarray) or type(x).__module__.startswith("PIL"):
            if self.kind == "text":
                raise ShiftbenchError(f"shift {self.name!r} corrupts text; got an image")
            image = to_rgb_uint8(x)
            if sample_id is not None:
                sid = str(sample_id)
            else:  # the content decides the random stream; a shift that draws nothing skips the hash
                sid = content_id(image) if self.draws_randomly else UNHASHED_ID
            return Sample(image=image, id=sid), lambda s: s.image
        raise ShiftbenchError(f"shift {self.name!r} cannot take {type(x).__name__}; give an image array or a Sample")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({args})"


class ImageShift(Shift):
    """A shift of the image alone: ``image_params`` draws, ``apply_image`` paints.

    Override ``apply_images`` to vectorise over a batch of same-sized images.
    """

    def image_params(self, image: np.ndarray, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        return {}

    def apply_image(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    def apply_images(self, images: Sequence[np.ndarray], params: Sequence[dict[str, Any]]) -> list[np.ndarray]:
        return [self.apply_image(im, p) for im, p in zip(images, params)]

    def sample_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        return self.image_params(sample.image, severity, rng)

    def apply(self, sample: Sample, params: dict[str, Any]) -> Sample:
        return self.apply_batch([sample], [params])[0]

    def apply_batch(self, samples: Sequence[Sample], params: Sequence[dict[str, Any]]) -> list[Sample]:
        images = self.apply_images([s.image for s in samples], params)
        out = []
        for s, im in zip(samples, images):
            im = np.asarray(im)
            if im.dtype != np.uint8 or im.shape != s.image.shape:
                raise RuntimeError(f"shift {self.name!r} returned {im.dtype} {im.shape} for {s.image.shape} input")
            out.append(s.replace(image=np.ascontiguousarray(im)))
        return out


class TextShift(Shift):
    """A corruption of text: ``text_params`` draws, ``apply_text`` edits.

    On a Sample it corrupts the caption; on a Query the modification text; a str gives a str.
    """

    kind: ClassVar[str] = "text"
    role: ClassVar[str] = "text"
    keeps: ClassVar[frozenset[str]] = frozenset({"label", "mask", "boxes", "layout"})

    def text_params(self, text: str, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        return {}

    def apply_text(self, text: str, params: dict[str, Any]) -> str:
        raise NotImplementedError

    def draw_text(self, text: str, severity: int | None = None, seed: int = 0, sample_id: str | None = None) -> dict:
        """Params for ``text``; without ``sample_id`` the text itself picks the stream (see the module docstring)."""
        seed = check_seed(seed)
        return self._draw_text(text, self.check_severity(severity), seed, sample_id)

    def _draw_text(self, text: str, severity: int | float, seed: int, sample_id: str | None) -> dict:
        if sample_id is None:
            sample_id = content_id(text)
        return check_params(self.text_params(text, severity, self.rng(seed, sample_id)), self.name)

    def sample_params(self, sample: Any, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        return self.text_params(text_of(sample, self.name), severity, rng)

    def apply(self, sample: Any, params: dict[str, Any]) -> Any:
        text = self.apply_text(text_of(sample, self.name), params)
        if isinstance(sample, Query):
            return sample.replace(text=text)
        return sample.replace(caption=text)

    def draw_parsed(self, sample: Any, severity: int | float, seed: int) -> dict[str, Any]:
        return self._draw_text(text_of(sample, self.name), severity, seed, sample.id)

    def __call__(self, x: Any, severity: int | None = None, seed: int = 0, sample_id: str | None = None,
                 return_params: bool = False) -> Any:
        if isinstance(x, str):
            params = self.draw_text(x, severity, seed, sample_id)
            out = self.apply_text(x, params)
            return (out, params) if return_params else out
        return super().__call__(x, severity, seed, sample_id, return_params)  # a list: our _call_batch

    def _call_batch(self, items, severity, seed, sample_ids, return_params):
        if all(isinstance(t, str) for t in items):
            if sample_ids is None or isinstance(sample_ids, str):
                sample_ids = [sample_ids] * len(items)
            params = [self._draw_text(t, severity, seed, sid) for t, sid in zip(items, sample_ids)]
            outs = self.apply_texts(items, params)
            return (outs, params) if return_params else outs
        return super()._call_batch(items, severity, seed, sample_ids, return_params)

    def apply_texts(self, texts: Sequence[str], params: Sequence[dict[str, Any]]) -> list[str]:
        """Apply to many strings; override to vectorise. Must equal ``apply_text`` one by one."""
        return [self.apply_text(t, p) for t, p in zip(texts, params)]

    def replay(self, x: Any, params: dict[str, Any]) -> Any:
        check_replay_params(self, x, params)  # a ParamsError naming the key that is not this shift's
        try:
            return self.apply_text(x, params) if isinstance(x, str) else self.apply(x, params)
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            if isinstance(exc, ShiftbenchError):
                raise
            raise replay_failed(self, exc) from exc

    def _wrap(self, x: Any, sample_id: str | None):
        if isinstance(x, Query):
            if sample_id is not None:
                x = x.replace(id=str(sample_id))
            return x, lambda q: q
        return super()._wrap(x, sample_id)


def text_of(x: Any, shift_name: str) -> str:
    """The text a text shift corrupts: a query's modification text or a sample's caption."""
    if isinstance(x, Query):
        return x.text
    if isinstance(x, Sample):
        if x.caption is None:
            raise ShiftbenchError(f"text shift {shift_name!r}: sample {x.id} has no caption to corrupt")
        return x.caption
    raise ShiftbenchError(f"text shift {shift_name!r} cannot take {type(x).__name__}")


