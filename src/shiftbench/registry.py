"""One generic registry for shifts, models, datasets, metrics and tasks.

Entries are registered with a decorator in the module that defines them, or lazily as a
``"module:attribute"`` string so that listing never imports heavy backends (torch, diffusers).
Names are listed with glob patterns; an unknown name is answered with close matches.

>>> reg = Registry("widget")
>>> @reg.register("round_widget", description="a round one")
... def make_round(size=1):
...     return ("round", size)
>>> reg.create("round_widget", size=3)
('round', 3)
>>> reg.names("round*")
['round_widget']
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import inspect
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable

from .errors import ShiftbenchError, UnknownNameError


@dataclass(frozen=True)
class ShiftInfo:
    """A shift's declaration, read through :func:`shift_info`: ``family``, its ``group=`` (``noise``, ``cbar``,
    ``background``...); ``role``, its class's (``corruption``, ``text``, ``background``, ``attribute``, ``baseline``);
    ``compose``, its conditions' ObjectCompose family (``prompt``: the prompt names it); ``source``, an attack's
    parameter naming its source model, and its default; ``level``: char or word; ``contract``: False where the
    weight-free shift contract does not apply (weights, other shifts)."""

    family: str | None = None
    role: str = "other"
    compose: str | None = None
    source: tuple[str, str] | None = None
    level: str | None = None
    contract: bool = True

    @classmethod
    def declared(cls, target: Any, group: str | None = None, **given: Any) -> "ShiftInfo":
        return cls(**{"family": group, "role": getattr(target, "role", "other"), **given})


@dataclass(frozen=True)
class MetricInfo:
    """A metric's task (``classification`` ... or ``any``) and direction: its class's ``task`` and
    ``higher_is_better`` (a lazy entry's keywords), read through :func:`metric_info`."""

    task: str = "any"
    higher_is_better: bool = True

    @classmethod
    def declared(cls, target: Any, **given: Any) -> "MetricInfo":
        given.setdefault("higher_is_better", bool(getattr(target, "higher_is_better", True)))
        return cls(**{"task": getattr(target, "task", "any"), **given})


@dataclass
class Entry:
    """One registered name. ``target`` is the object, or a ``"module:attr"`` string until resolved; ``meta``: its
    registration keywords as given; ``info``: their typed form (ShiftInfo, MetricInfo), what code reads."""

    name: str
    target: Any
    description: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    info: Any = None

    @property
    def lazy(self) -> bool:
        return isinstance(self.target, str)

    def resolve(self) -> Any:
        if isinstance(self.target, str):
            module_name, _, attr = self.target.partition(":")
            module = importlib.import_module(module_name)
            try:
                self.target = getattr(module, attr)
            except AttributeError as exc:  # a packaging bug, not a user mistake
                raise ImportError(f"{module_name} has no attribute {attr!r}") from exc
        return self.target


class Registry:
    """Names -> factories, with lazy entries, scheme prefixes (``timm:NAME``) and glob listing.

    ``providers`` are modules imported on first use; they register the built-in entries. They must
    stay light (no torch at import time): heavy entries are registered lazily; ``info`` types their keywords.
    """

    def __init__(self, kind: str, providers: Iterable[str] = (), info: Callable[..., Any] | None = None):
        self.kind = kind
        self._info = info
        self._providers = list(providers)
        self._loaded = False
        self._entries: dict[str, Entry] = {}
        self._schemes: dict[str, Entry] = {}

    # -- registration -------------------------------------------------------------------------
    def register(self, name: str | None = None, *, description: str | None = None, **meta: Any) -> Callable:
        """Decorator: register a class or function under ``name`` (default: its ``name`` attribute)."""

        def decorator(obj: Any) -> Any:
            entry_name = name or getattr(obj, "name", None) or obj.__name__
            doc = description
            if doc is None:
                doc = summary_line(obj.__doc__)
            self.add(entry_name, obj, description=doc, **meta)
            if isinstance(obj, type) and not getattr(obj, "__dict__", {}).get("name"):
                try:
                    obj.name = entry_name
                except (AttributeError, TypeError):
                    pass
            return obj

        return decorator

    def add(self, name: str, target: Any, *, description: str = "", **meta: Any) -> None:
        """Register ``target`` (object or ``"module:attr"`` string) under ``name``."""
        if not name or not isinstance(name, str):
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")
        if name in self._entries and self._entries[name].target is not target:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        info = None if self._info is None else self._info(target, **meta)
        self._entries[name] = Entry(name, target, description, dict(meta), info)

    def add_lazy(self, name: str, target: str, *, description: str = "", **meta: Any) -> None:
        if ":" not in target:
            raise ValueError(f"lazy target must be 'module:attr', got {target!r}")
        self.add(name, target, description=description, **meta)

    def add_scheme(self, prefix: str, target: Any, *, description: str = "", **meta: Any) -> None:
        """Names of the form ``prefix:REST`` are created by ``target(REST, **kw)``."""
        self._schemes[prefix] = Entry(prefix + ":", target, description, dict(meta))

    # -- lookup -------------------------------------------------------------------------------
    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for module in self._providers:
            importlib.import_module(module)

    def entry(self, name: str) -> Entry:
        self._load()
        if not isinstance(name, str):
            raise UnknownNameError(f"{self.kind} name must be a string, got {type(name).__name__}")
        if name in self._entries:
            return self._entries[name]
        prefix, sep, _ = name.partition(":")
        if sep and prefix in self._schemes:
            return self._schemes[prefix]
        raise UnknownNameError(self._unknown_message(name))

    def _unknown_message(self, name: str) -> str:
        names = sorted(self._entries) + [p + ":NAME" for p in sorted(self._schemes)]
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        message = f"unknown {self.kind} {name!r}"
        if close:
            message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
        shown = ", ".join(names[:40]) + (" ..." if len(names) > 40 else "")
        message += f" Available: {shown}" if names else f" (no {self.kind}s are registered)"
        return message

    def no_match_message(self, pattern: str) -> str:
        """The one line for a listing pattern that matches nothing, with close names when there are some."""
        self._load()
        names = sorted(self._entries) + [p + ":" for p in sorted(self._schemes)]
        bare = pattern.strip("*?[]")
        close = difflib.get_close_matches(bare, names, n=3, cutoff=0.6) if bare else []
        message = f"no {self.kind}s match {pattern!r}"
        if close:
            message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
        return message

    def get(self, name: str) -> Any:
        """The registered object (imported now if lazy). Scheme names return the scheme factory."""
        return self.entry(name).resolve()

    def create(self, name: str, **kwargs: Any) -> Any:
        """Call the registered factory; ``prefix:REST`` names call the scheme factory with REST."""
        entry = self.entry(name)
        factory = entry.resolve()
        if entry.name.endswith(":") and entry.name not in self._entries:
            return factory(name.partition(":")[2], **kwargs)
        _check_arguments(self.kind, name, factory, kwargs)
        return factory(**kwargs)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self.entry(name)
        except UnknownNameError:
            return False
        return True

    def names(self, pattern: str | None = None) -> list[str]:
        """Sorted names matching a glob pattern (``*`` if none); a bare word matches as a substring."""
        return [e.name for e in self.entries(pattern)]

    def entries(self, pattern: str | None = None) -> list[Entry]:
        self._load()
        pattern = pattern or "*"
        if not any(ch in pattern for ch in "*?["):
            pattern = f"*{pattern}*"
        found = [e for n, e in self._entries.items() if fnmatch.fnmatchcase(n, pattern)]
        found += [e for e in self._schemes.values() if fnmatch.fnmatchcase(e.name, pattern)]
        return sorted(found, key=lambda e: e.name)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"


_RST_ROLE = re.compile(r":[\w:.-]+:`(~?)([^`<]*?)\s*(?:<[^>]*>)?`")  # :class:`y`, :func:`~a.b`, :ref:`text <t>`
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(`\"'])")


def summary_line(doc: str | None) -> str:
    """The first sentence of a docstring on one line, RST markup removed (for listings).

    >>> summary_line('''Mean IoU over ``miou`` classes (see
    ...     :class:`~shiftbench.metrics.MeanIoU`). More text.''')
    'Mean IoU over miou classes (see MeanIoU).'
    """
    if not doc:
        return ""
    paragraph = re.split(r"\n\s*\n", inspect.cleandoc(doc), maxsplit=1)[0]
    text = " ".join(paragraph.split())
    text = _RST_ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    text = re.sub(r"``([^`]*)``", r"\1", text)
    text = re.sub(r"`([^`]*)`_?", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*", lambda m: m.group(1) or m.group(2), text)
    return _SENTENCE_END.split(text, maxsplit=1)[0].rstrip(":;, ")


def _check_arguments(kind: str, name: str, factory: Any, kwargs: dict[str, Any]) -> None:
    """Refuse unknown or missing keyword arguments with a message naming the accepted ones (the fields of a
    factory's ``option_groups``, the dataclasses its ``**`` keywords are parsed into, among them)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return
    if getattr(factory, "option_groups", ()):
        own = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
        names = [f.name for g in factory.option_groups for f in fields(g) if f.name not in signature.parameters]
        keyword = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in names]
        signature = signature.replace(parameters=own + keyword)
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        accepted = [p for p in signature.parameters if p not in ("self", "args", "kwargs")]
        raise ShiftbenchError(
            f"{kind} {name!r}: {exc}; accepted parameters: {', '.join(accepted) or 'none'}"
        ) from None


SHIFTS = Registry(
    "shift",
    providers=[
        "shiftbench.shifts.basic",
        "shiftbench.shifts.corruptions",
        "shiftbench.shifts.cbar",
        "shiftbench.shifts.perturbations",
        "shiftbench.shifts.text",
        "shiftbench.shifts.background",
        "shiftbench.shifts.attributes",
        "shiftbench.shifts.chain",
    ],
    info=ShiftInfo.declared,
)
MODELS = Registry("model", providers=["shiftbench.models"])
DATASETS = Registry("dataset", providers=["shiftbench.datasets"])
METRICS = Registry("metric", providers=["shiftbench.metrics"], info=MetricInfo.declared)
TASKS = Registry("task", providers=["shiftbench.tasks"])


# -- the one reader of shift and metric declarations ---------------------------------------------
def shift_info(name: str) -> ShiftInfo:
    """A shift's declaration; the empty one (no family) for a name no shift is registered under."""
    return SHIFTS.entry(name).info if name in SHIFTS else ShiftInfo()


def family_members(family: str) -> list[str]:
    """The registered shifts of a family, by name."""
    return [e.name for e in SHIFTS.entries() if e.info.family == family]


def metric_info(metric: Any) -> MetricInfo:
    """A metric's task and direction: a registered name's declaration, or a metric object's own attributes."""
    return METRICS.entry(metric).info if isinstance(metric, str) else MetricInfo.declared(metric)
