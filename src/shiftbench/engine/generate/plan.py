"""A generate call's options, parsed once where they enter (``sb.generate`` keywords, the CLI's flags) into a
frozen :class:`GenerateOptions`, and its plan, built once before any output (:class:`GeneratePlan`: the source
opened, every (shift, severity) checked against the shift's range, the outputs checked to fit the layout)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ...condition import Condition
from ...datasets import reader_kwargs
from ...errors import Option, ShiftbenchError, SpecError
from ...files import check_apart
from ...registry import SHIFTS
from ...seeds import check_seed
from ...shifts.groups import group_members
from ...severity import Severity, check, parse
from ..engines import check_reachable
from ..kernel import Loader, Planned
from ..shards import LAYOUTS
from ..spec import EngineSection, PreprocessSection, preprocess_section
from .encode import Job, encoded, format_label, loader_of, open_dataset
from .layout import base_of, check_outputs_fit, check_sequences, data_paths, is_sequence, writes_files

CHUNK = 16
IMAGE_FORMATS = ("png", "jpeg", "webp")
# the published procedures generate reproduces: preprocessing, encoding, and the file naming of the layout
PROTOCOLS = {
    # hendrycks/robustness ImageNet-C/create_c/make_imagenet_c.py: trn.Resize(256), trn.CenterCrop(224), the
    # corruption, Image.fromarray(np.uint8(img)).save(<corruption>/<severity>/<wnid>/<file name>, quality=85,
    # optimize=True)
    "imagenet-c": {"resize": 256, "crop": 224, "interpolation": "bilinear", "image_format": "jpeg", "quality": 85},
    # hendrycks/robustness ImageNet-P/create_p/make_imagenet_p.py: trn.Resize(256), each perturbation's frames with
    # trn.CenterCrop(224) (after the warp for the geometric ones, before the others), saved as img<i>.png and then
    # encoded to <perturbation>/<wnid>/<name>.mp4 by ffmpeg (libx264): here the lossless PNG frames are kept, one
    # folder per sequence (<wnid>/<name>/), the bytes the run scores
    "imagenet-p": {"resize": 256, "crop": None, "interpolation": "bilinear", "image_format": "png", "quality": 95,
                   "shift_params": {"crop": 224}, "sequences": True},
}


@dataclass(frozen=True)
class GenerateOptions:
    """How a generate call runs and encodes, checked once (:meth:`parse`): the seed in its domain, a known
    engine (an address only for ray, answering), positive shard sizes, a known image format and layout, the
    quality in 1..100, a protocol's preset with what a caller added on top, the preprocessing as a spec's
    ``preprocess:`` section."""

    workers: int = 1
    seed: int = 0
    limit: int | None = None
    image_format: str = "png"
    quality: int = 95
    shift_params: dict[str, Any] = field(default_factory=dict)
    dataset_kwargs: dict[str, Any] = field(default_factory=dict)
    progress: bool = False
    on_error: str = "fail"
    engine: str = "local"
    address: str | None = None
    shard_size: int = CHUNK
    layout: str = "folder"
    shard_samples: int = 1000
    preprocess: PreprocessSection | None = None
    protocol: str | None = None  # a published procedure (PROTOCOLS): its encoding and its file names
    announce: Callable[[str], None] | None = None  # told the files and their estimated size before any work

    @classmethod
    def parse(cls, **given: Any) -> "GenerateOptions":
        """The options of ``generate``'s keywords: the fields, and ``resize`` / ``crop`` / ``interpolation``
        (the preprocessing), ``fmt`` (the older name of ``image_format``; ``layout="png"`` or ``"jpeg"``, the
        CLI's older ``--format png``, a folder in that encoding) and ``jpeg_quality`` (of ``quality``): a name
        and its older one that disagree are refused."""
        known = {f.name for f in dataclasses.fields(cls)} - {"preprocess"}
        unknown = sorted(set(given) - known - {"resize", "crop", "interpolation", "fmt", "jpeg_quality"})
        if unknown:
            raise TypeError(f"generate() got an unexpected keyword argument {unknown[0]!r}")
        seed = check_seed(given.get("seed", 0))  # the one seed domain (seeds.py); the manifest records this int
        layout, fmt, quality = _aliases(given)
        preprocess, fmt, quality = _encoding_and_preprocess(given, fmt, quality, layout)
        values = {k: v for k, v in given.items() if k in known}
        preset = PROTOCOLS.get(given.get("protocol") or "", {}).get("shift_params", {})  # a protocol's shift settings
        options = cls(**{**values, "seed": seed, "layout": layout, "image_format": fmt, "quality": quality,
                         "preprocess": preprocess, "shift_params": {**preset, **dict(given.get("shift_params") or {})},
                         "dataset_kwargs": dict(given.get("dataset_kwargs") or {})})
        options._check()
        return options

    def _check(self) -> None:  # a bad engine, address, shard size, image format or layout: before the data is read
        EngineSection().with_overrides(name=self.engine, address=self.address)  # a known engine; an address only for ray
        if self.engine == "ray" and self.address and self.address != "auto":
            check_reachable(self.address)  # before any work: a wrong address is one line in seconds
        if isinstance(self.shard_size, bool) or not isinstance(self.shard_size, int) or self.shard_size < 1:
            raise ShiftbenchError(f"shard_size must be a positive int, got {self.shard_size!r}")
        if self.image_format not in IMAGE_FORMATS:
            raise ShiftbenchError(f"image format {self.image_format!r}: expected one of {', '.join(IMAGE_FORMATS)}")
        if self.layout not in LAYOUTS:
            raise ShiftbenchError(f"output format {self.layout!r}: expected one of {', '.join(LAYOUTS)}")
        samples = self.shard_samples
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ShiftbenchError(f"shard_samples must be a positive int, got {samples!r}")


def _aliases(given: dict[str, Any]) -> tuple[str, str | None, int | None]:
    """The layout, image format and quality a call names, each older name resolved here and only here."""
    layout, fmt, older = given.get("layout", "folder"), given.get("image_format"), given.get("fmt")
    if layout in ("png", "jpeg"):  # the CLI's --format png / jpeg (kept for older commands): a folder in that encoding
        if fmt is not None and fmt != layout:
            raise ShiftbenchError("", hint=(Option("layout", layout, "--format"), " and ", Option("image_format", fmt),
                                            " disagree; give one of them"))
        layout, fmt = "folder", layout
    if older is not None and fmt is not None and older != fmt:
        raise ShiftbenchError("", hint=(Option("fmt", older), " and ", Option("image_format", fmt),
                                        " disagree; give one of them"))
    quality, jpeg_quality = given.get("quality"), given.get("jpeg_quality")
    if quality is not None and jpeg_quality is not None and quality != jpeg_quality:
        raise ShiftbenchError("", hint=(Option("quality", quality), " and ", Option("jpeg_quality", jpeg_quality),
                                        " disagree; give ", Option("quality"), " only"))
    return layout, fmt if fmt is not None else older, quality if quality is not None else jpeg_quality


def _encoding_and_preprocess(given: dict[str, Any], fmt: str | None, quality: int | None,
                             layout: str) -> tuple[PreprocessSection | None, str, int]:
    """The preprocessing, image format and quality a generate call asks for: a protocol's (PROTOCOLS), with
    ``fmt`` and ``quality`` on top when given; else ``resize`` / ``crop`` / ``interpolation`` and the format
    (default png) with ``quality`` (default 95). Checked with a spec's messages (``generate.resize: ...``)."""
    protocol = given.get("protocol")
    picked = {k: given.get(k) for k in ("resize", "crop", "interpolation")}
    picked = {k: list(v) if isinstance(v, tuple) else v for k, v in picked.items() if v is not None}
    if protocol is not None:
        if protocol not in PROTOCOLS:
            raise ShiftbenchError(f"protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        preset = PROTOCOLS[protocol]

        def norm(key: str, value: Any) -> Any:  # a crop of 224 and of [224, 224] are the same
            if key != "crop" or value is None:
                return value
            return [value, value] if isinstance(value, int) else list(value)

        for key, value in picked.items():
            if norm(key, value) != norm(key, preset[key]):
                raise ShiftbenchError(f"--{key} {value}: the {protocol} protocol fixes --resize {preset['resize']} "
                                      f"--crop {preset['crop']} --interpolation {preset['interpolation']}; drop --{key}, "
                                      f"or drop --protocol and give all three")
        if layout != "folder":
            raise ShiftbenchError(f"--protocol {protocol} writes {protocol}'s folder layout; drop --format {layout}")
        picked = {k: preset[k] for k in ("resize", "crop", "interpolation") if preset[k] is not None}
        fmt, quality = fmt or preset["image_format"], preset["quality"] if quality is None else quality
    else:
        fmt, quality = fmt or "png", 95 if quality is None else quality
    try:
        section = preprocess_section(picked, "generate")
    except SpecError as exc:
        raise ShiftbenchError(str(exc)) from None
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ShiftbenchError(f"quality {quality!r}: expected an integer in 1..100")
    return section, fmt, quality


def parse_severities(text: str | float | Sequence[float], where: str = "severity") -> list[Severity]:
    """'3' -> [3]; '1-5' -> [1..5]; '1,3,5' -> [1, 3, 5]; '1-2:0.5' -> [1, 1.5, 2] (a grid, ends included),
    read by the one parser of written severities (``shiftbench.severity.parse``); sorted, a severity given
    twice ('1-3,2') run once. Each shift's range and dial are checked by :func:`generate`.

    >>> parse_severities("1-2:0.5"), parse_severities("3,1-2")
    ([1, 1.5, 2], [1, 2, 3])
    """
    if isinstance(text, str):  # each comma part on its own: an overlap of parts is run once, as always
        return sorted({v for part in text.split(",") for v in parse(part.strip(), where)})
    return sorted(set(parse(text, where)))


def resolve_shifts(items: Iterable[str]) -> list[str]:
    """Expand shift names, comma lists, globs and groups.

    Groups (``shifts.groups``): ``all`` (ImageNet-C's 19), ``common`` (its 15), ``noise``, ``blur``,
    ``weather``, ``digital``, ``extra``, ``cbar`` (ImageNet-C-bar's 10); any other ``group`` of the registry
    (``text``, ``background``, ``attribute``) works the same way.
    """
    names: list[str] = []
    for item in items:
        for word in (w.strip() for w in str(item).split(",")):
            if not word:
                continue
            members = group_members(word)
            if members is not None:
                found = members
            elif any(ch in word for ch in "*?["):
                found = SHIFTS.names(word)
                if not found:
                    raise ShiftbenchError(f"no shift matches {word!r}")
            else:
                SHIFTS.entry(word)  # unknown names raise with "did you mean"
                found = [word]
            names.extend(n for n in found if n not in names)
    if not names:
        raise ShiftbenchError("no shift given")
    return names


@dataclass(frozen=True)
class GeneratePlan:
    """What a generate call will do, built by :meth:`build` before the out folder is touched."""

    source: str  # the dataset as the caller named it
    dataset: Any  # opened afresh
    dataset_kwargs: dict[str, Any]  # the reader arguments it was opened with
    shifts: tuple[str, ...]
    pairs: tuple[tuple[str, Severity], ...]  # every (shift, severity), canonical severities
    uses_model: dict[str, bool]
    modules: tuple[str, ...]  # modules outside shiftbench a worker imports to find the classes
    out: Path
    options: GenerateOptions

    @classmethod
    def build(cls, dataset: Any, shifts: Sequence[str], severities: Sequence[float], out: Any,
              options: GenerateOptions) -> "GeneratePlan":
        out = Path(out)
        check_sequences(shifts, options.layout, options.protocol)  # before a protocol's shift settings meet a shift
        ds, kwargs = open_source(str(dataset), options, out)
        pairs, uses_model, modules = plan_pairs(ds, shifts, severities, options.shift_params)
        check_outputs_fit(ds, shifts, str(dataset), options.layout, options.image_format, options.preprocess,
                          options.protocol)
        return cls(str(dataset), ds, kwargs, tuple(shifts), tuple(pairs), uses_model, modules, out, options)

    @property
    def folders(self) -> list[str]:
        """The OUT/<shift> folders the run writes (text shifts write none)."""
        return [name for name in self.shifts if writes_files(name)]

    @property
    def sharded(self) -> set[tuple[str, Severity]]:
        """The (shift, severity) pairs written as shards (none in the folder layout)."""
        return {(name, severity) for name, severity in self.pairs
                if self.options.layout != "folder" and writes_files(name)}

    def unreadable(self) -> list[dict[str, Any]]:
        """The manifest's records of the files the reader's screen left out (a limit wraps the reader; its
        screen saw every file)."""
        return [{"source": name, "skipped": reason} for name, reason in getattr(base_of(self.dataset), "skipped", [])]

    def loader(self, on_error: str | None = None) -> Loader:
        """The run kernel's loader of the source as the jobs read it (``on_error``: another mode)."""
        opt = self.options
        return loader_of(self.dataset, opt.seed, on_error or opt.on_error, opt.preprocess)

    def jobs(self, todo: Sequence[tuple[str, Severity, list[int]]]) -> list[Job]:
        """The work units of the indices still to do, ``shard_size`` indices each."""
        opt = self.options
        return [Job(self.source, self.dataset_kwargs, opt.limit, name, opt.shift_params, severity,
                    tuple(indices[start:start + opt.shard_size]), opt.seed, str(self.out), opt.image_format,
                    opt.quality, opt.on_error, self.modules,
                    opt.layout if (name, severity) in self.sharded else "folder", opt.preprocess, opt.protocol)
                for name, severity, indices in todo for start in range(0, len(indices), opt.shard_size)]

    def settings(self) -> dict[str, Any]:
        """The run's settings file (generate.json): a later run resumes only with equal settings."""
        opt = self.options
        fmt = opt.image_format
        config = {"dataset": self.source, "dataset_kwargs": self.dataset_kwargs, "limit": opt.limit,
                  "seed": opt.seed, "format": fmt, "jpeg_quality": opt.quality if fmt == "jpeg" else None,
                  "shift_params": opt.shift_params}
        if fmt == "webp":
            config["quality"] = opt.quality
        if opt.layout != "folder":  # a folder run's settings file stays as it was
            config.update(layout=opt.layout, shard_samples=opt.shard_samples)
        # absent when unset, so that an earlier run's folder still resumes with the same options
        if opt.preprocess is not None:
            config["preprocess"] = opt.preprocess.as_dict()
        if opt.protocol is not None:
            config["protocol"] = opt.protocol
        return config


def open_source(dataset: str, options: GenerateOptions, out: Path) -> tuple[Any, dict[str, Any]]:
    """The dataset, opened afresh, and the reader arguments it was opened with; refused when empty or when
    ``out`` overlaps the data."""
    given = Path(dataset).expanduser()
    if given.exists():  # before the data is even read: outputs never land in (or around) the source
        check_apart(out, [given], "generate")
    # skip mode screens headers up front (cheap); a file that fails only when decoded is skipped by its job
    kwargs = reader_kwargs(dataset, dict(options.dataset_kwargs), options.on_error, verify="header")
    # a folder may have changed since an earlier call in this process: list it afresh
    ds = open_dataset(dataset, kwargs, options.limit, fresh=True)
    if len(ds) == 0:
        raise ShiftbenchError(f"dataset {dataset!r} has no samples")
    check_apart(out, data_paths(ds), "generate")  # a registered dataset's own folder too
    return ds, kwargs


def plan_pairs(ds: Any, shifts: Sequence[str], severities: Sequence[float],
               shift_params: dict[str, Any]) -> tuple[list[tuple[str, Severity]], dict[str, bool], tuple[str, ...]]:
    """Every (shift, severity) to run, each severity checked against the shift's range and, when fractional,
    its dial (``shiftbench.severity.check``) and kept canonical (3, 2.5); whether each shift loads a model;
    the modules a worker must import to find the dataset's and shifts' classes."""
    plan: list[tuple[str, Severity]] = []
    uses_model: dict[str, bool] = {}
    modules = {m for m in (type(ds).__module__, type(base_of(ds)).__module__)}
    for name in shifts:
        shift = SHIFTS.create(name, **shift_params) if shift_params else SHIFTS.create(name)
        uses_model[name] = shift.uses_model
        modules.add(type(shift).__module__)
        plan.extend((name, severity) for severity in check(severities, shift, "generate", name))
    # only modules a worker can import by name; shiftbench's own register themselves on import
    user_modules = tuple(sorted(m for m in modules if m != "__main__" and not m.startswith("shiftbench.")))
    return plan, uses_model, user_modules


def expected_output(plan: GeneratePlan) -> str:
    """One line saying, before any work, how many files the plan writes and about how many bytes: the first
    sample, preprocessed, encoded under each shift at its middle planned severity (a shift that loads a model
    is estimated by the clean image's encoding), times the samples and severities."""
    ds, opt = plan.dataset, plan.options
    fmt, quality, protocol, preprocess = opt.image_format, opt.quality, opt.protocol, opt.preprocess
    files = [(name, severity) for name, severity in plan.pairs if writes_files(name)]
    severities: dict[str, list[Severity]] = {}
    for name, severity in files:
        severities.setdefault(name, []).append(severity)
    # with on_error: fail a first image the preprocessing refuses (a crop larger than it) stops here, before any work
    read = plan.loader().read([0])
    first = read.samples[0] if read.samples else None
    n_sev = len({severity for _, severity in files})
    # a perturbation sequence (ImageNet-P) writes a folder of frames per image
    frames = {name: int(getattr(SHIFTS.entry(name).resolve(), "frames", 1)) if is_sequence(name) else 1
              for name in severities}
    n_files = sum(frames[name] for name, _ in files) * len(ds)
    count = (f"{len(ds)} image(s) x {len(severities)} shift(s) x {n_sev} severit{'y' if n_sev == 1 else 'ies'} = "
             f"{n_files} files" + (" (ImageNet-P sequences: a frame per file)" if any(v > 1 for v in frames.values())
                                   else ""))
    how = format_label(fmt, quality, protocol) + (f"; {preprocess.describe()}" if preprocess is not None else "")
    if first is None:
        return f"generate: {count} ({how}); size not estimated (the first image could not be read)"
    clean = len(encoded(first.image, fmt, quality, protocol))
    total = 0
    for name, sevs in severities.items():
        size = clean
        if not plan.uses_model.get(name):
            severity = sorted(sevs)[len(sevs) // 2]
            params = opt.shift_params
            shift = SHIFTS.create(name, **params) if params else SHIFTS.create(name)
            try:
                out = plan.loader("skip").shift(
                    Planned(Condition("", "", name, dict(params), severity), shift), read)
                if out.samples:
                    size = len(encoded(out.samples[0].image, fmt, quality, protocol)) * frames[name]
            except ShiftbenchError:
                pass
        total += size * len(sevs) * len(ds)
    h, w = first.image.shape[:2]
    return (f"generate: {count}, about {_human_bytes(total)} (estimated from the first image, {w}x{h}, encoded "
            f"under each shift); {how}")


def _human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
