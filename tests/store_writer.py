"""A store writer run as a separate process by the store tests (killed and restarted, or run twice at once)."""

from __future__ import annotations

import sys
import time

from shiftbench.results.store import Condition, Store


def expected_value(condition: int, batch: int) -> float:
    return (condition * 31 + batch * 7) % 97 / 97.0


def run(db: str, name: str, conditions: int, batches: int, delay: float) -> None:
    store = Store(db)
    run_id = store.start_run({"writer": name, "conditions": conditions, "batches": batches}, seed=0)
    for c in range(conditions):
        key = Condition(model=f"m{c % 3}", dataset="d", shift=f"s{c}", params={"k": c}, severity=c % 5 + 1)
        cid = store.condition(run_id, key)
        if store.is_done(cid):
            continue
        done = store.batches(cid)
        for b in range(batches):
            if b in done:
                continue
            time.sleep(delay)
            store.save_batch(cid, b, {"sum": expected_value(c, b), "n": 4},
                             predictions=[(f"{b}-{i}", {"label": i}) for i in range(4)])
        states = store.batches(cid)
        total = sum(s["sum"] for s in states.values())
        store.finish_condition(cid, {"score": (total, 4 * batches), "batches": (len(states), len(states))})
    store.finish_run(run_id)
    store.close()


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
