"""Seeds: the one domain every entry point accepts, ``0 <= seed < 2**63``, checked in one place.

The Python API (shift calls, ``draw``, ``make_rng``), the spec, the CLI, the training policies, the datasets,
the manifests of ``generate`` and the store all take the same seeds, so a seed recorded anywhere can be
given back anywhere. 2**63 is the bound because the store keeps a run's seed in an SQLite INTEGER (a signed
64-bit number); within it every seed gives its own random streams (``shifts.base.derive_seed`` keeps all
63 bits).

Accepted: ``int`` and numpy integers (any ``numbers.Integral`` but ``bool``). Refused, with a
:class:`SeedError` naming the seed: negative numbers, 2**63 and above, ``bool`` (``True`` is an int to
Python, but never meant as a seed), floats (even ``3.0``: a float seed is usually a computed value that
lost its integer type, and rounding it would hide that), strings (``"3"``: parse it first, as the CLI
does) and None.

>>> check_seed(7)
7
>>> check_seed(2**63)
Traceback (most recent call last):
...
shiftbench.errors.SeedError: seed: expected an integer 0 <= seed < 2**63, got 9223372036854775808 (int)
"""

from __future__ import annotations

import numbers
from typing import Any

from .errors import SeedError

__all__ = ["SEED_MAX", "check_seed", "parse_seed"]

SEED_MAX = 2**63  # exclusive: the largest seed is SEED_MAX - 1, the largest SQLite INTEGER


def _shown(value: Any, typed: bool = True) -> str:
    """The bad value as the message shows it: its repr, cut short, and (``typed``) its type."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for Python to print (over 4300 digits)
        return f"an integer of {int(value).bit_length()} bits ({type(value).__name__})"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})" if typed else text


def check_seed(seed: Any, where: str = "seed") -> int:
    """``seed`` as a plain int when ``0 <= seed < 2**63`` (an int or a numpy integer); a SeedError otherwise.

    ``where`` names the seed in the message (``"seed"``, ``"spec.yaml: seed"``, ``"--seed"``), which
    always contains the word ``seed``.
    """
    if type(seed) is int:  # the common case, kept cheap: shifts check the seed of every sample they draw
        if 0 <= seed < SEED_MAX:
            return seed
    elif not isinstance(seed, bool) and isinstance(seed, numbers.Integral) and 0 <= seed < SEED_MAX:
        return int(seed)
    if "seed" not in where:
        where = f"{where} (seed)"
    raise SeedError(f"{where}: expected an integer 0 <= seed < 2**63, got {_shown(seed)}")


def parse_seed(text: Any, where: str = "--seed") -> int:
    """A seed from command-line text (decimal digits, an optional ``+``): what ``--seed`` options take.

    The message quotes the text as given (``got '-1'``, ``got '1e3'``); a value that is not text is
    checked as :func:`check_seed` checks it.
    """
    if not isinstance(text, str):
        return check_seed(text, where)
    digits = text.strip().removeprefix("+")
    if digits.isascii() and digits.isdigit() and len(digits) <= 19 and int(digits) < SEED_MAX:
        return int(digits)
    raise SeedError(f"{where}: expected an integer 0 <= seed < 2**63, got {_shown(text, typed=False)}")
