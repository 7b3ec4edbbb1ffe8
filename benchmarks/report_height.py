"""Height of a store's HTML report: builds the report and prints its full-page screenshot height at 1400 px wide.

    python benchmarks/report_height.py STORE [--out DIR] [--width 1400] [--run RUN_ID ...] [--png FILE]

All runs of the store go into one report (as ``shiftbench demo`` writes it) unless ``--run`` names some.
The report is built from the store alone (read-only; copy a store you do not want touched anyway).
Needs playwright and Debian's chromium, as the report's browser test does. Folded sections
(``<details>``) count closed, as a reader first sees the page.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def page_height(html: Path, width: int = 1400, png: Path | None = None) -> int:
    """Full-page screenshot height in pixels of ``html`` rendered at ``width`` CSS pixels (scale 1)."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser_path:
        raise SystemExit("report_height: chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        shot = Path(png) if png else Path(tmp) / "report.png"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": width, "height": 900}, device_scale_factor=1)
            page.goto(html.resolve().as_uri())
            page.wait_for_load_state("load")
            page.screenshot(path=str(shot), full_page=True)
            browser.close()
        with Image.open(shot) as img:
            return int(img.size[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/report_height.py")
    parser.add_argument("store")
    parser.add_argument("--out", default=None, help="report folder (default: a temporary one)")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--run", action="append", default=None, help="run id (repeatable; default: all runs)")
    parser.add_argument("--png", default=None, help="also keep the screenshot here")
    args = parser.parse_args(argv)

    from shiftbench.report import build_report
    from shiftbench.results.store import Store

    runs = args.run
    if runs is None:
        with Store(args.store, create=False) as db:
            runs = [r["run_id"] for r in sorted(db.runs(), key=lambda r: r["started"])]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "report"
        html = build_report(args.store, out, run_id=runs)
        height = page_height(html, args.width, Path(args.png) if args.png else None)
        print(f"{html}: {height} px tall at {args.width} px wide ({len(runs)} run{'s' if len(runs) != 1 else ''}, "
              f"{html.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
