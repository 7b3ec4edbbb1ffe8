"""Exceptions for user mistakes: the CLI prints them as one line, without a traceback.

A message that tells the user which setting to change names it as the user gives it: a Python caller reads
``on_error='skip'``, a command-line user ``--on-error skip``. Such a message carries the setting as an
:class:`Option` in its ``hint`` (the parts appended to the message); ``str(error)`` renders the keyword and
the CLI prints ``error.render(cli=True)``, which renders the flag.

>>> err = ShiftbenchError("2 unreadable images", hint=(" (pass ", Option("on_error", "skip"), " to skip them)"))
>>> str(err), err.render(cli=True)
("2 unreadable images (pass on_error='skip' to skip them)", '2 unreadable images (pass --on-error skip to skip them)')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Option:
    """A setting named in a message: ``name`` the Python keyword (``on_error``), ``value`` what to set
    (``True`` for a flag), ``flag`` the command line's option when it is not ``--`` + the name with dashes."""

    name: str
    value: Any = True
    flag: str | None = None

    def python(self) -> str:
        return f"{self.name}={self.value!r}"

    def cli(self) -> str:
        flag = self.flag or "--" + self.name.replace("_", "-")
        return flag if self.value is True else f"{flag} {self.value}"


class ShiftbenchError(Exception):
    """A problem the user can fix (bad name, bad file, bad spec). Printed as one line by the CLI.

    ``hint``: parts (text and :class:`Option`) appended to the message, each option said as the caller
    gives it (:meth:`render`)."""

    hint: tuple[Any, ...] = ()

    def __init__(self, *args: Any, hint: Sequence[Any] = ()):
        super().__init__(*args)
        self.hint = tuple(hint)

    def render(self, cli: bool = False) -> str:
        """The message with its hint; options as flags (``cli``) or as Python keywords."""
        base = str(self.args[0]) if len(self.args) == 1 else Exception.__str__(self)
        return base + "".join((p.cli() if cli else p.python()) if isinstance(p, Option) else str(p)
                              for p in self.hint)

    def __str__(self) -> str:
        return self.render(cli=False)


class UnknownNameError(ShiftbenchError, KeyError):
    """A name that is not in a registry."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return self.render(cli=False)


class SpecError(ShiftbenchError):
    """A benchmark spec that is malformed; the message points at the bad key."""


class ImageError(ShiftbenchError):
    """An image that cannot be read or converted; the message names the file and the problem."""


class StoreError(ShiftbenchError):
    """A results store that cannot be used (not a shiftbench database, wrong spec, ...)."""


class SeverityError(ShiftbenchError, ValueError):
    """A severity outside a shift's range."""


class SeedError(ShiftbenchError, ValueError):
    """A seed outside the one domain every entry point accepts: an integer 0 <= seed < 2**63 (seeds.py)."""


class DatasetError(ShiftbenchError):
    """A dataset's annotation file with a record that cannot be used as written (a duplicate id, a
    category that is not listed, a non-finite coordinate, ...); the message names the file and the record."""


class ParamsError(ShiftbenchError, ValueError):
    """Recorded shift params that are not the shift's (a key missing or unknown, a value of another type);
    the message names the key."""
