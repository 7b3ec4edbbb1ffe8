"""Text shifts: the seven natural text corruptions (registered on import).

``text_swap text_qwerty text_remove_char text_remove_space`` change characters,
``text_misspelling text_repetition text_homophone`` change words; see docs/text_corruptions.md.
"""

from ._core import FRACTIONS, TextChanges, TextCorruption, TextEdit, levenshtein, units_to_change
from .character import Qwerty, RemoveChar, RemoveSpace, Swap
from .word import Homophone, Misspelling, Repetition, homophones, misspellings

__all__ = [
    "FRACTIONS", "TextChanges", "TextCorruption", "TextEdit", "levenshtein", "units_to_change",
    "Swap", "Qwerty", "RemoveChar", "RemoveSpace", "Misspelling", "Repetition", "Homophone",
    "misspellings", "homophones",
]
