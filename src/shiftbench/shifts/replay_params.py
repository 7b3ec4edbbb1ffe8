"""The check ``Shift.replay`` makes of recorded params: they must have the shape of the shift's own draw.

A shift's params are plain JSON data (``sample_params``). Params given to ``replay`` are compared with a
reference drawn by the shift itself for the same input (default severity, seed 0): the same keys, at any
depth, and values of the same JSON type (an integer where a number is drawn is fine; ``None`` in the
reference accepts anything). A list whose items share one shape accepts any length; a list of mixed items
(a tuple: ``["replace", 14, "horse", "hoarse"]``) needs the same length. The recorded ``severity`` is
checked by the shift's own ``check_severity``. A mismatch is one :class:`ParamsError` naming the key.

>>> import shiftbench as sb, numpy as np
>>> image = np.zeros((32, 32, 3), np.uint8)
>>> sb.create_shift("motion_blur").replay(image, {"severity": 2})
Traceback (most recent call last):
...
shiftbench.errors.ParamsError: shift 'motion_blur': replay params: missing key 'angle' (its params: 'severity', 'angle')
"""

from __future__ import annotations

from typing import Any

from ..errors import ParamsError

_MAX_PROBLEMS = 3


def check_replay_params(shift: Any, x: Any, params: Any) -> None:
    """Raise a ParamsError naming the first keys of ``params`` that do not fit ``shift`` (see the module)."""
    if not isinstance(params, dict):
        raise ParamsError(f"shift {shift.name!r}: replay params must be a mapping of the shift's params, "
                          f"got {_kind(params)}")
    reference = _reference(shift, x)
    if "severity" in params and (reference is None or "severity" in reference):
        if params["severity"] is None:  # check_severity would read it as "the default"
            raise ParamsError(f"shift {shift.name!r}: replay params: 'severity' is null, expected an integer")
        shift.check_severity(params["severity"])  # a SeverityError naming the value, as a fresh call gives
    if reference is None:
        return
    problems: list[str] = []
    _compare(reference, params, "", problems, top=True)
    if problems:
        more = f"; and {len(problems) - _MAX_PROBLEMS} more" if len(problems) > _MAX_PROBLEMS else ""
        raise ParamsError(f"shift {shift.name!r}: replay params: {'; '.join(problems[:_MAX_PROBLEMS])}{more}")


def replay_failed(shift: Any, exc: BaseException) -> ParamsError:
    """What ``replay`` raises when ``apply`` fails (not with a ShiftbenchError of its own) on params of the
    right shape: a ParamsError naming the shift and the reason."""
    reason = " ".join(str(exc).split())[:200]
    return ParamsError(f"shift {shift.name!r}: replay params do not fit this input ({type(exc).__name__}: {reason})")


def _reference(shift: Any, x: Any) -> dict[str, Any] | None:
    """The params the shift draws for ``x`` (None when it cannot draw for it: apply then judges alone)."""
    try:
        if isinstance(x, str):
            return shift.draw_text(x, None, 0, "replay")
        return shift.draw(x, None, 0)
    except Exception:  # noqa: BLE001 - e.g. a prompt needing a class name the bare input lacks; apply decides
        return None


# JSON kinds as a message names them; bool before int (True is an int to Python)
_KINDS = ((type(None), "null"), (bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
          (list, "a list"), (dict, "a mapping"))


def _kind(value: Any) -> str:
    return next((name for kind, name in _KINDS if isinstance(value, kind)), f"a {type(value).__name__}")


def _shape(value: Any) -> Any:
    """What items of one list must share, at every depth, to count as alike (numbers of either kind are
    alike; a list's shape is the set of its items' shapes, whatever its length)."""
    if isinstance(value, dict):
        return ("mapping", tuple((k, _shape(v)) for k, v in sorted(value.items())))
    if isinstance(value, list):
        return ("list", tuple(sorted({repr(_shape(v)) for v in value})))
    kind = _kind(value)
    return "a number" if kind == "an integer" else kind


def _name(path: str, key: Any) -> str:
    return f"{path}[{key!r}]" if path else repr(key)


def _compare(ref: Any, value: Any, path: str, problems: list[str], top: bool = False) -> None:
    where = path or "params"
    if ref is None:
        return
    if isinstance(ref, dict):
        if not isinstance(value, dict):
            problems.append(f"{where} is {_kind(value)}, expected a mapping")
            return
        expected = ", ".join(repr(k) for k in ref)
        problems.extend(f"missing key {_name(path, k)} (its params: {expected})" for k in ref if k not in value)
        problems.extend(f"unknown key {_name(path, k)} (its params: {expected})" for k in value if k not in ref)
        for k in ref:
            if k in value and not (top and k == "severity"):  # checked by the shift's check_severity
                _compare(ref[k], value[k], _name(path, k), problems)
    elif isinstance(ref, list):
        if not isinstance(value, list):
            problems.append(f"{where} is {_kind(value)}, expected a list")
        elif ref and len({repr(_shape(r)) for r in ref}) == 1:  # alike items: any length, each like them
            like = next((r for r in ref if isinstance(r, float)), ref[0])
            for i, item in enumerate(value):
                _compare(like, item, f"{where}[{i}]", problems)
        elif ref:
            if len(value) != len(ref):
                problems.append(f"{where} has {len(value)} items, expected {len(ref)}")
            else:
                for i, (r, item) in enumerate(zip(ref, value)):
                    _compare(r, item, f"{where}[{i}]", problems)
    else:
        kind, want = _kind(value), _kind(ref)
        if kind != want and not (want == "a number" and kind == "an integer"):
            problems.append(f"{where} is {kind} ({str(value)[:40]!r}), expected {want}")
