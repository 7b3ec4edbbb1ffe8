"""Cost of the streaming readers: indexing time, ``load(i)`` time and what stays in memory, for the same
``N`` images as an image folder, WebDataset tar shards, Parquet files and a ``datasets`` save_to_disk folder.

Images: the ``objects`` dataset at 64 px repeated to ``N`` records (PNG, ~10 KB each). Reported per format:
index (construction with ``verify="none"``), random ``load(i)`` (mean over 200 records), the Python heap
growth over construction (tracemalloc) and pyarrow's allocations (the table's images stay on disk / in the
memory map).

    python benchmarks/streaming_readers.py --n 20000 [--json out.json]
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import tarfile
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="records")
    ap.add_argument("--per-shard", type=int, default=1000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    import shiftbench as sb

    base = sb.load_dataset("objects", limit=64, size=64)
    pngs, labels = [], []
    for i in range(base.__len__()):
        s = base.load(i)
        buf = io.BytesIO()
        Image.fromarray(s.image).save(buf, format="PNG")
        pngs.append(buf.getvalue())
        labels.append(s.meta["wnid"])
    n = args.n
    tmp = Path(tempfile.mkdtemp(prefix="sb-stream-"))
    wds = tmp / "wds"
    wds.mkdir()
    for start in range(0, n, args.per_shard):
        with tarfile.open(wds / f"shard-{start // args.per_shard:06d}.tar", "w") as tar:
            for i in range(start, min(n, start + args.per_shard)):
                for name, data in ((f"{i:08d}.png", pngs[i % 64]), (f"{i:08d}.cls", labels[i % 64].encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    table = pa.table({"image": pa.array([pngs[i % 64] for i in range(n)]),
                      "label": pa.array([labels[i % 64] for i in range(n)])})
    (tmp / "pq").mkdir()
    pq.write_table(table, tmp / "pq" / "train.parquet", row_group_size=100)
    (tmp / "hf").mkdir()
    with pa.OSFile(str(tmp / "hf" / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=1000):
                writer.write_batch(batch)
    (tmp / "hf" / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (tmp / "hf" / "dataset_info.json").write_text("{}")
    data_bytes = sum(len(pngs[i % 64]) for i in range(n))
    del table

    rows = []
    rng = np.random.default_rng(0)
    picks = rng.integers(0, n, 200)
    for fmt, root in (("webdataset", wds), ("parquet", tmp / "pq"), ("hf save_to_disk", tmp / "hf")):
        arrow_before = pa.total_allocated_bytes()
        t0 = time.perf_counter()
        ds = sb.load_dataset(root, verify="none")
        index_s = time.perf_counter() - t0
        del ds
        tracemalloc.start()  # a second construction, measured apart: tracemalloc slows allocations down
        ds = sb.load_dataset(root, verify="none")
        heap = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        t0 = time.perf_counter()
        for i in picks:
            ds.load(int(i))
        load_ms = 1000 * (time.perf_counter() - t0) / len(picks)
        arrow = pa.total_allocated_bytes() - arrow_before
        assert len(ds) == n
        rows.append({"format": fmt, "records": n, "image_mb": data_bytes / 1e6, "index_s": index_s,
                     "load_ms": load_ms, "index_heap_mb": heap / 1e6, "arrow_mb_after_loads": arrow / 1e6})
        del ds
    print(f"{'format':<16} {'records':>8} {'images MB':>10} {'index s':>8} {'load ms':>8} {'index heap MB':>14} "
          f"{'arrow MB':>9}")
    for r in rows:
        print(f"{r['format']:<16} {r['records']:>8} {r['image_mb']:>10.1f} {r['index_s']:>8.2f} {r['load_ms']:>8.2f} "
              f"{r['index_heap_mb']:>14.1f} {r['arrow_mb_after_loads']:>9.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
