"""How this shiftbench is installed, and the install advice that works there (one helper for every message).

shiftbench is installed from a checkout (``pip install -c constraints-cpu.txt -e ".[torch,gen,stream]"``, the
README's install; or a source tree on ``PYTHONPATH``) or from a package (a wheel or an index). The optional parts
are extras of pyproject.toml (``ray``, ``gen``, ``torch``, ``timm``, ``open_clip``, ``stream``). ``pip install
"shiftbench[ray]"`` only works for the second: from a checkout it asks an index for a distribution that is not
there, and would replace the checkout's code if it were. So every "needs X: pip install ..." message asks
:func:`install_command` for the command that fits:

- a checkout: ``pip install -c constraints-cpu.txt -e ".[ray]"`` (relative when the working directory is the
  checkout, else with the checkout's paths, so it can be pasted anywhere); ``-e`` only for an editable install
  or a source tree, ``-c`` only when the checkout has its constraints file; the hub backends (``timm``,
  ``open_clip``, ``torchvision``) take ``constraints-test.txt``, the pins with a torchvision build;
- a package: ``pip install "shiftbench[ray]"``.

Found from the imported package's own path (inside a ``src/`` folder beside a pyproject.toml naming shiftbench:
a source tree, editable or not) or pip's record of the install (``direct_url.json``: ``dir_info`` for an install
from a folder, ``dir_info.editable`` for an editable one). Nothing here imports the rest of shiftbench.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Installation", "installation", "install_command", "from_direct_url"]

CONSTRAINTS = "constraints-cpu.txt"
# the hub backends import torchvision, which this machine class has only for the torch build of the test pins
HUB_EXTRAS = ("timm", "open_clip", "torchvision")
HUB_CONSTRAINTS = "constraints-test.txt"
_NAME = re.compile(r'^\s*name\s*=\s*["\']shiftbench["\']\s*$', re.MULTILINE)


@dataclass(frozen=True)
class Installation:
    """``checkout``: the source folder shiftbench was installed from (None for a package); ``editable``:
    whether its code runs from there (``pip install -e`` or a source tree on the path)."""

    checkout: Path | None
    editable: bool

    def command(self, extra: str, cwd: Path | None = None) -> str:
        """The pip command that adds the extra ``extra`` to this installation (see the module docstring)."""
        if self.checkout is None:
            return f'pip install "shiftbench[{extra}]"'
        here = (cwd or Path.cwd()).resolve()
        root = self.checkout.resolve()
        name = HUB_CONSTRAINTS if extra in HUB_EXTRAS and (root / HUB_CONSTRAINTS).is_file() else CONSTRAINTS
        constraints = root / name
        if here == root:
            target, cons = f'".[{extra}]"', name
        else:
            target, cons = _quote(f"{root}[{extra}]"), shlex.quote(str(constraints))
        parts = ["pip install"]
        if constraints.is_file():
            parts.append(f"-c {cons}")
        if self.editable:
            parts.append("-e")
        parts.append(target)
        return " ".join(parts)


def _quote(text: str) -> str:
    """Double quotes (brackets are glob characters in most shells), as the README writes the extras."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`") + '"'


def _is_project(folder: Path) -> bool:
    try:
        return bool(_NAME.search((folder / "pyproject.toml").read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError):
        return False


@functools.lru_cache(maxsize=None)
def installation() -> Installation:
    """How the imported shiftbench is installed (cached: it does not change while the process runs)."""
    package = Path(__file__).resolve().parent
    if package.parent.name == "src" and _is_project(package.parent.parent):
        return Installation(package.parent.parent, True)  # the code runs from a source tree
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        text = distribution("shiftbench").read_text("direct_url.json")
    except (ImportError, PackageNotFoundError, OSError):
        text = None
    return from_direct_url(text)


def from_direct_url(text: str | None) -> Installation:
    """The installation pip's ``direct_url.json`` (PEP 610) records: a folder (``dir_info``, ``editable`` or
    not) holding shiftbench's pyproject.toml is a checkout; anything else (an index, a wheel, no record) a
    package."""
    try:
        record = json.loads(text) if text else {}
    except ValueError:
        record = {}
    if not isinstance(record, dict):
        record = {}
    url, dir_info = record.get("url"), record.get("dir_info")
    if isinstance(url, str) and url.startswith("file://") and isinstance(dir_info, dict):
        from urllib.parse import urlparse
        from urllib.request import url2pathname

        folder = Path(url2pathname(urlparse(url).path))
        if _is_project(folder):
            return Installation(folder, bool(dir_info.get("editable")))
    return Installation(None, False)


def install_command(extra: str) -> str:
    """The command that installs shiftbench's optional part ``extra`` where this shiftbench is installed:
    ``pip install -c constraints-cpu.txt -e ".[ray]"`` from a checkout, ``pip install "shiftbench[ray]"``
    from a package. Every message that says how to install an extra uses it."""
    try:
        cwd = Path(os.getcwd())
    except OSError:  # the working folder was removed: the checkout's full paths
        cwd = None
    return installation().command(extra, cwd or Path(os.sep))
