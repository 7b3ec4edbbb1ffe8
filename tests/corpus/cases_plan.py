"""Corpus cases for the run's plan: the dry run's promise, and selections that never count a sample twice.

Before, a dry run passed where the first batch then stopped: Mixed-Same / Mixed-Rand backgrounds on a user's
own folder (no meta 'contexts'), images smaller than the corruptions accept (also when only the batch's second
image is small); an ``ids:`` file listing a sample twice scored it twice and counted it twice in ``n``; a shift
entry repeated in the spec was planned twice (and stored once); a ``label_map`` was never read when the label
spaces already matched, so its typos passed. Each case is a user-style image folder (``data/<class>/<img>.png``)
and a spec that is valid but for the one thing it guards.
"""

from __future__ import annotations

from dataclasses import replace

from pathlib import Path

from corpus.case import Case, write_png, write_text

MODEL = "models: [{name: dummy_classifier, params: {label_space: [cat, dog]}}]\n"
EMPTY_OUT = {"out_empty": True}  # refused before anything is written
DRY_RUN = ["evaluate", "--config", "spec.yaml", "--store", "{out}/results.db", "--dry-run"]
RUN = ["evaluate", "--config", "spec.yaml", "--store", "{out}/results.db"]


def _folder(root: Path, sizes: tuple[tuple[int, int], ...] = ((32, 32), (32, 32))) -> None:
    """``data/cat`` and ``data/dog`` with one image per (h, w) in ``sizes`` each."""
    for c, name in enumerate(("cat", "dog")):
        for i, (h, w) in enumerate(sizes):
            write_png(root / "data" / name / f"{i}.png", h, w, seed=10 * c + i)


def _case(spec_body: str, sizes: tuple[tuple[int, int], ...] = ((32, 32), (32, 32)), ids: str | None = None):
    """A builder: the folder of ``sizes`` images and ``spec.yaml`` (dataset, model, metric, then ``spec_body``)."""

    def build(root: Path) -> None:
        _folder(root, sizes)
        if ids is not None:
            write_text(root / "ids.txt", ids)
        write_text(root / "spec.yaml", f"dataset: data\n{MODEL}metrics: [top1]\nbatch_size: 4\n{spec_body}")

    return build


CASES = [
    Case("mixed-same-on-a-plain-folder", _case("shifts: [{name: background_scene, params: {scene: mixed_same}}]\n"),
         DRY_RUN, 2, "cannot run on sample 'cat/0.png': background_scene scene='mixed_same'",
         "Mixed-Same on a folder without contexts passed the dry run, then stopped on the first batch", "dry-run",
         EMPTY_OUT),
    Case("mixed-rand-in-a-chain-on-a-plain-folder",
         _case("shifts: [{name: chain, shifts: [{name: background_scene, params: {scene: mixed_rand}}, fog]}]\n"),
         DRY_RUN, 2, "needs the object's contexts",
         "a chain's first step needing contexts is checked on the first batch too", "dry-run", EMPTY_OUT),
    Case("tiny-images-with-a-corruption",
         _case("shifts: [{name: gaussian_noise, severities: [1]}]\n", ((8, 8), (8, 8))),
         DRY_RUN, 2, "needs images of at least 32x32 px, got 8x8",
         "images smaller than the corruptions accept passed the dry run, then the run crashed", "dry-run", EMPTY_OUT),
    Case("tiny-second-image-of-the-first-batch",
         _case("shifts: [{name: zoom_blur, severities: [3]}]\n", ((32, 32), (1, 40))),
         DRY_RUN, 2, "cannot run on sample 'cat/1.png': corruption 'zoom_blur' needs images of at least 32x32 px",
         "the dry run checks every sample of the first batch, not only the first one", "dry-run", EMPTY_OUT),
    Case("ids-file-lists-a-sample-twice",
         _case("shifts: [clean]\nids: ids.txt\n", ids="cat/0.png\ndog/0.png\ncat/0.png\n"),
         RUN, 2, "ids.txt:3: id 'cat/0.png' is listed twice (lines 1 and 3)",
         "a sample listed twice in the ids file was scored twice and counted twice in n", "numbers", EMPTY_OUT),
    Case("shift-entry-repeated", _case("shifts: [{name: fog, severities: [1, 2]}, clean, {name: fog, severity: 2}]\n"),
         DRY_RUN, 2, "shifts[2]: repeats shifts[0] ('fog', severity 2)",
         "the same shift, params and severity listed twice was planned twice and stored once", "dry-run", EMPTY_OUT),
    Case("label-map-typo-when-spaces-match", _case("shifts: [clean]\nlabel_map: {cat: cat, dgo: dog}\n"),
         DRY_RUN, 2, "label_map: 'dgo' is not a class of the dataset's label space",
         "a label_map was never read when the label spaces matched, so its typos passed", "numbers", EMPTY_OUT),
]

# the issue-25 class of each case (files-lost, numbers silently wrong, traceback, dry-run promise)
KINDS = {
    "mixed-same-on-a-plain-folder": "dry-run",
    "mixed-rand-in-a-chain-on-a-plain-folder": "dry-run",
    "tiny-images-with-a-corruption": "dry-run",
    "tiny-second-image-of-the-first-batch": "dry-run",
    "ids-file-lists-a-sample-twice": "numbers",
    "shift-entry-repeated": "numbers",
    "label-map-typo-when-spaces-match": "numbers",
}
CASES = [replace(case, kind=KINDS[case.name]) for case in CASES]
