"""Speed of the seven text corruptions on 12-word sentences, side by side with nlpaug.

    python benchmarks/text.py [--n 20000] [--severity 3] [--json benchmarks/results/text.json]

One process, one thread; rates are per CPU-second of this process (per core), with the batch
rate in wall-clock time beside it (lower when other jobs share the machine). shiftbench is timed four ways: a batch call on a list of strings (no
sample ids: the texts share one generator stream), a batch with one sample id per sentence (one
generator per sentence, as when a dataset's captions are corrupted), one call per sentence, and the
replay of recorded params (``apply_texts``). nlpaug is timed on its ``augment(list)`` for the
corruptions it also has (swap, keyboard, delete, spelling), set to change about the same share of
words (one character per chosen word). Best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import shiftbench as sb  # noqa: E402
from shiftbench.shifts.text import FRACTIONS, misspellings  # noqa: E402

FUNCTION_WORDS = "a the of on in with to and is his her an at by".split()


def sentences(n: int, seed: int = 0, words: int = 12) -> list[str]:
    """Caption-like sentences: a third function words, the rest common content words."""
    rng = random.Random(seed)
    content = sorted(misspellings())
    return [" ".join(rng.choice(FUNCTION_WORDS) if rng.random() < 0.35 else rng.choice(content)
                     for _ in range(words)) for _ in range(n)]


def best_rate(fn, n_items: int, repeat: int, clock=time.process_time) -> float:
    """Items per second of the best run. The default clock is this process's CPU time, so the rate
    is per core even on a machine that other jobs share; pass time.perf_counter for wall time."""
    best = float("inf")
    for _ in range(repeat):
        start = clock()
        fn()
        best = min(best, clock() - start)
    return n_items / max(best, 1e-9)


def nlpaug_augmenters(fraction: float) -> dict:
    try:
        import nlpaug
        import nlpaug.augmenter.char as nac
        import nlpaug.augmenter.word as naw
    except ImportError:
        return {}
    spelling = Path(nlpaug.__file__).parent / "res" / "word" / "spelling" / "spelling_en.txt"
    one_char = dict(aug_char_min=1, aug_char_max=1, aug_word_p=fraction, aug_word_max=100, min_char=3)
    return {
        "text_swap": nac.RandomCharAug(action="swap", **one_char),
        "text_qwerty": nac.KeyboardAug(include_special_char=False, include_numeric=False, **one_char),
        "text_remove_char": nac.RandomCharAug(action="delete", **one_char),
        "text_misspelling": naw.SpellingAug(dict_path=str(spelling), aug_p=fraction, aug_max=100),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="sentences per shiftbench run")
    parser.add_argument("--n-nlpaug", type=int, default=2000, help="sentences per nlpaug run (it is slower)")
    parser.add_argument("--severity", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "text.json")
    args = parser.parse_args()

    texts = sentences(args.n)
    ids = [f"s{i}" for i in range(len(texts))]
    fraction = FRACTIONS[args.severity - 1]
    augmenters = nlpaug_augmenters(fraction)
    rows = []
    for name in sb.list_shifts("text_*"):
        shift = sb.create_shift(name)
        shift(texts[:100], severity=args.severity, seed=0)  # load word lists, warm caches
        sev, k = args.severity, min(len(texts), 5000)
        _, params = shift(texts, severity=sev, seed=0, return_params=True)
        row = {
            "shift": name,
            "level": sb.SHIFTS.entry(name).meta["level"],
            "batch": best_rate(lambda: shift(texts, severity=sev, seed=0), len(texts), args.repeat),
            "batch_wall": best_rate(lambda: shift(texts, severity=sev, seed=0), len(texts), args.repeat,
                                    time.perf_counter),
            "batch_ids": best_rate(lambda: shift(texts, severity=sev, seed=0, sample_id=ids), len(texts), args.repeat),
            "one_by_one": best_rate(lambda: [shift(t, severity=sev, seed=0) for t in texts[:k]], k, args.repeat),
            "replay": best_rate(lambda: shift.apply_texts(texts, params), len(texts), args.repeat),
            "changed": sum(p["edits"] != [] for p in params) / len(params),
            "edits_per_sentence": sum(len(p["edits"]) for p in params) / len(params),
        }
        aug = augmenters.get(name)
        if aug is not None:
            import numpy as np

            subset = texts[: args.n_nlpaug]
            random.seed(0)
            np.random.seed(0)  # nlpaug draws from the global generators
            row["nlpaug"] = best_rate(lambda: aug.augment(subset), len(subset), args.repeat)
            row["nlpaug_class"] = type(aug).__name__
        rows.append(row)

    head = f"{'shift':18} {'level':5} {'batch/s':>9} {'wall/s':>8} {'ids/s':>8} {'1-by-1/s':>9} {'replay/s':>9} {'nlpaug/s':>9} {'x':>5} {'edits':>5}"
    print(f"12-word sentences, severity {args.severity} (fraction {fraction}), one thread, best of {args.repeat}, "
          f"sentences per CPU-second (wall/s: per wall-clock second); load average {os.getloadavg()[0]:.1f}")
    print(head)
    print("-" * len(head))
    for r in rows:
        nl = r.get("nlpaug")
        nl_text = "-" if nl is None else f"{nl:.0f}"
        ratio = "-" if nl is None else f"{r['batch'] / nl:.0f}"
        print(f"{r['shift']:18} {r['level']:5} {r['batch']:9.0f} {r['batch_wall']:8.0f} {r['batch_ids']:8.0f} {r['one_by_one']:9.0f} "
              f"{r['replay']:9.0f} {nl_text:>9} {ratio:>5} {r['edits_per_sentence']:5.2f}")
    target = 100_000
    char_rates = {r["shift"]: r["batch"] for r in rows if r["level"] == "char"}
    met = all(v >= target for v in char_rates.values())
    print(f"target >= {target:,} sentences/s per core for the character-level corruptions (batch): "
          f"{'met' if met else 'NOT met'} (slowest {min(char_rates, key=char_rates.get)} "
          f"{min(char_rates.values()):,.0f}/s)")
    result = {
        "sentences": args.n, "words_per_sentence": 12, "severity": args.severity, "repeat": args.repeat,
        "clock": "process CPU time (batch_wall: wall clock)", "load_average": os.getloadavg()[0],
        "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
        "nlpaug": __import__("nlpaug").__version__ if augmenters else None,
        "target_per_core": target, "target_met": met, "rows": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
