"""Corpus cases for seeds: one domain, 0 <= seed < 2**63, refused in one line everywhere else.

Before, a seed of 2**64 gave the bytes of seed 0 (the generator kept the low 64 bits) while the manifest
recorded the seed given; ``seed: 2**70`` in a spec passed the dry run and then crashed in the store
(an SQLite INTEGER is 64 bits); a quoted seed or a float was refused with another message per entry point.
Each case is a valid image folder and spec (or generate command) but for the seed.
"""

from __future__ import annotations

from dataclasses import replace

from pathlib import Path

from corpus.case import Case, write_png, write_text

CLASSES = ("n01440764", "n01443537")  # ImageNet ids: the dummy classifier's label space names them
MESSAGE = "seed: expected an integer 0 <= seed < 2**63"
EMPTY_OUT = {"out_empty": True}  # refused before anything is written


def _images(root: Path) -> None:
    for c, name in enumerate(CLASSES):
        for i in range(2):
            write_png(root / "images" / name / f"img{i}.png", 32, 32, seed=10 * c + i)  # corruptions need 32 px


def _spec_with_seed(seed_text: str):
    """A builder: the image folder and a one-shift spec whose ``seed:`` line is ``seed_text``."""

    def build(root: Path) -> None:
        _images(root)
        write_text(root / "spec.yaml", "dataset: images\nmodels: [dummy_classifier]\n"
                                       "shifts: [{name: gaussian_noise, severities: [2]}]\n"
                                       f"metrics: [top1]\nbatch_size: 4\nseed: {seed_text}\n")

    return build


def _evaluate(dry_run: bool) -> list[str]:
    return ["evaluate", "--config", "spec.yaml", "--store", "{out}/results.db"] + (["--dry-run"] if dry_run else [])


def _generate(seed_text: str) -> list[str]:
    return ["generate", "--dataset", "images", "--shift", "gaussian_noise", "--severity", "2",
            "--out", "{out}/shifted", "--seed", seed_text]


CASES = [
    Case("seed-2-pow-70-dry-run", _spec_with_seed("1180591620717411303424"), _evaluate(dry_run=True), 2,
         "seed: expected an integer 0 <= seed < 2**63, got 1180591620717411303424 (int)",
         "a seed of 2**70 passed the dry run, then the store (64-bit integers) crashed on it", "dry-run", EMPTY_OUT),
    Case("seed-2-pow-63-spec", _spec_with_seed("9223372036854775808"), _evaluate(dry_run=False), 2,
         MESSAGE, "the first seed past the domain: one more than the largest SQLite INTEGER", "numbers", EMPTY_OUT),
    Case("seed-negative-spec", _spec_with_seed("-1"), _evaluate(dry_run=False), 2,
         "seed: expected an integer 0 <= seed < 2**63, got -1 (int)",
         "a negative seed is refused, not wrapped to another seed's stream", "numbers", EMPTY_OUT),
    Case("seed-string-spec", _spec_with_seed("'7'"), _evaluate(dry_run=True), 2,
         "seed: expected an integer 0 <= seed < 2**63, got '7' (str)",
         "a quoted seed is refused as the spec wrote it, not parsed into a number", "spec", EMPTY_OUT),
    Case("seed-2-pow-64-generate", _images, _generate("18446744073709551616"), 2,
         "--seed: expected an integer 0 <= seed < 2**63, got '18446744073709551616'",
         "generate --seed 2**64 wrote the bytes of seed 0 and recorded 2**64 in the manifest", "numbers", EMPTY_OUT),
    Case("seed-negative-generate", _images, _generate("-1"), 2,
         "--seed: expected an integer 0 <= seed < 2**63, got '-1'",
         "generate --seed -1 is one line and exit 2, like the spec's seed", "numbers", EMPTY_OUT),
]

# the issue-25 class of each case (files-lost, numbers silently wrong, traceback, dry-run promise)
KINDS = {
    "seed-2-pow-70-dry-run": "dry-run",
    "seed-2-pow-63-spec": "traceback",
    "seed-negative-spec": "numbers",
    "seed-string-spec": "numbers",
    "seed-2-pow-64-generate": "numbers",
    "seed-negative-generate": "numbers",
}
CASES = [replace(case, kind=KINDS[case.name]) for case in CASES]
