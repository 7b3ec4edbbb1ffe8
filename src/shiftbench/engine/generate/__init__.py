"""Write shifted copies of a dataset: images (lossless PNG by default) and a manifest of every draw.

Layout: ``OUT/<shift>/<severity>/<source relative path with the output suffix>``, and
``OUT/manifest.jsonl`` with one record per output (source id, shift, severity, seed, the shift's
config and the sampled params, the output path and format). Text shifts write no images; their
records carry the corrupted text.

The source tree is mirrored: ``root/class/x.jpg`` gives ``OUT/<shift>/<severity>/class/x.png``, so
``OUT/<shift>/<severity>`` of an image folder is an image folder again (same classes, same labels),
and the manifest and settings stay one level above, out of the readers' way. A format with
annotation files is written in that format (the reader's ``mirror_*`` hooks, datasets/base.py): a COCO
input gives ``<shift>/<severity>/annotations/instances_<split>.json`` (file names rewritten) with the
images under ``<split>/``; a VOC input gives ``JPEGImages/<id>.png`` with each image's label files
copied unchanged and the split's id list. A shift that does not keep what those annotations describe
(``keeps``: boxes, masks) is refused before any work. Nothing is ever
overwritten: two sources that would give one output (``x.jpg`` and ``x.png``) are refused before
any work, naming both files.

Unreadable images: ``on_error="fail"`` (default) stops on the first one (files whose header is broken
are all named before any work); ``"skip"`` leaves them out with one log line each batch and a manifest
record ``{"skipped": reason, ...}`` in place of the output.

Resumable and worker-invariant: each output is a pure function of (sample, shift, severity, seed),
written to a temporary file and renamed; its record goes to ``manifest.partial.jsonl`` after the
file is in place. A restarted run skips what the journal lists and redoes the rest. At the end the
manifest is written in a canonical order, so neither an interruption nor the number of workers
changes a single byte of the output.

Preprocessing (``resize``, ``crop``, ``interpolation``; datasets/preprocess.py) is applied to every sample as
it is read, before the shift, through the same loader as a run's ``preprocess:`` section; it is recorded in the
settings file and in every record. ``protocol="imagenet-c"`` is ImageNet-C's procedure (hendrycks/robustness,
``ImageNet-C/create_c/make_imagenet_c.py``): resize the shorter side to 256 (bilinear, Pillow, as
torchvision's ``Resize(256)`` on a PIL image), centre crop 224, the shift, then JPEG at quality 85 with
``optimize=True`` (Pillow's other defaults, 4:2:0 chroma subsampling), written to
``OUT/<shift>/<severity>/<class folder>/<original file name>``, the name kept when its extension is a JPEG one
(a ``.png`` source becomes ``.jpg``). ``image_format`` (png, jpeg, webp) and ``quality`` set the encoding with
or without the preset. Before any work, ``announce`` (the CLI prints it) is told the number of files and
their estimated size, from encoding the first sample under each shift.

The package, by what it does: ``plan`` (the options parsed once, :class:`GenerateOptions`; the plan built once,
:class:`GeneratePlan`), ``encode`` (the work unit a worker runs, the encoders), ``layout`` (where outputs go, the
shards, the checks before any work) and ``journal`` (the out folder's settings, journal, resume and manifest).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from ...errors import ShiftbenchError
from ...severity import Severity
from .encode import format_label, save_options
from .journal import (CONFIG, JOURNAL, MANIFEST, append_records, claim_out, finalise_manifest, release, resume,
                      run_and_journal, todo)
from .layout import (SUFFIX, base_of, check_annotations_kept, check_collisions, class_lists, collect_shards,
                     data_paths, output_relpath, protocol_relpath, write_indexes)
from .plan import (CHUNK, IMAGE_FORMATS, PROTOCOLS, GenerateOptions, GeneratePlan, expected_output, parse_severities,
                   resolve_shifts)

__all__ = ["generate", "GenerateOptions", "GeneratePlan", "parse_severities", "resolve_shifts", "base_of",
           "output_relpath", "protocol_relpath", "check_collisions", "check_annotations_kept", "data_paths",
           "save_options", "format_label", "expected_output", "append_records", "MANIFEST", "JOURNAL", "CONFIG",
           "CHUNK", "IMAGE_FORMATS", "SUFFIX", "PROTOCOLS"]


def generate(dataset: str, shifts: Sequence[str], severities: Sequence[float], out: str | os.PathLike,
             options: GenerateOptions | None = None, **given: Any) -> dict[str, int]:
    """Apply each shift at each severity to every sample of ``dataset``; see the module docstring.

    ``options`` (:class:`GenerateOptions`), or its keywords (:meth:`GenerateOptions.parse`). ``engine``:
    ``"local"`` (this machine, ``workers`` processes) or ``"ray"`` (Ray tasks per shard of ``shard_size`` sample
    indices, model-loading shifts on a pool of actors; ``address`` joins an existing cluster, none starts a local
    one on ``workers`` CPUs); the bytes written depend on neither the engine, the workers nor the shard size.
    ``layout``: ``"folder"``, ``"webdataset"`` (tar shards) or ``"parquet"``, of at most ``shard_samples``
    samples each (:mod:`shiftbench.engine.shards`).

    Returns counts: ``written`` (outputs made now), ``skipped`` (already done by an earlier,
    interrupted run), ``total`` (manifest records) and ``unreadable`` (source files, and samples the
    shift failed on, left out by ``on_error="skip"``).
    """
    options = options if options is not None else GenerateOptions.parse(**given)
    plan = GeneratePlan.build(dataset, shifts, severities, out, options)
    unreadable = plan.unreadable()
    if options.announce is not None and plan.folders:
        options.announce(expected_output(plan))
    claim = claim_out(plan.out, plan.settings(), plan.folders)
    try:
        done = resume(plan.out, plan.folders)
        left, skipped = todo(plan, done)
        classes = class_lists(plan.dataset, plan.out, options.layout, plan.sharded)
        # records of shards not yet complete, by (shift, severity, shard number): written whole when complete
        pending: dict[tuple[str, Severity, int], dict[int, dict]] = {}

        def collect(records: list[dict]) -> list[dict]:
            return collect_shards(records, pending, plan, classes)

        written = run_and_journal(plan.jobs(left), plan, collect, done)
        if pending:  # every job returned, so every shard is complete; anything left is a bug, never silently lost
            raise ShiftbenchError(f"generate: {len(pending)} shard(s) incomplete after every job returned")
        write_indexes(plan.dataset, plan.out, [p for p in plan.pairs if p not in plan.sharded], done)  # shards hold their own
        finalise_manifest(plan.out, done, unreadable)
        failed = {r["index"] for r in done.values() if "skipped" in r}
        return {"written": written, "skipped": skipped, "total": len(done) + len(unreadable),
                "unreadable": len(unreadable) + len(failed)}
    except BaseException:
        release(claim)
        raise
