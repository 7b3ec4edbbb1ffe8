"""Exceptions for user mistakes: the CLI prints them as one line, without a traceback."""

from __future__ import annotations


class ShiftbenchError(Exception):
    """A problem the user can fix (bad name, bad file, bad spec). Printed as one line by the CLI."""


class UnknownNameError(ShiftbenchError, KeyError):
    """A name that is not in a registry."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


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
