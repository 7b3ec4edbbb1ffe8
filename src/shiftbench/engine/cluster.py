"""Joining an existing Ray cluster (``--address HOST:PORT``): token authentication matched to the cluster's,
and a refusal named in one line (authentication, Ray version mismatch; engines.check_reachable: nothing there).

Ray (2.52 and later) authenticates every call to a cluster with a token when ``RAY_AUTH_MODE=token``. It
finds the token, in this order, in ``RAY_AUTH_TOKEN``, in the file ``RAY_AUTH_TOKEN_PATH`` names, or in
``~/.ray/auth_token``. ``ray start --head`` and a local ``ray.init()`` turn token mode on by themselves when
``RAY_AUTH_MODE`` is unset and a token is found (a local ``ray.init()`` writes one if there is none), but
``ray.init(address=...)`` with an explicit address leaves it off, so a driver on the very machine whose
``ray start --head`` runs with its token was refused. Joining an address, shiftbench follows
``RAY_AUTH_MODE`` when it is set; unset, it asks the cluster once and sends this machine's token only to a
cluster that requires one (Ray's modes must match: a token-mode driver cannot run actors on a cluster
without authentication).

Ray is imported only by the functions here, which only the ray engine calls.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator

from ..errors import ShiftbenchError

AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
HEAD_TOKEN = "the head's token (`ray get-auth-token` prints it there)"
MISSING = f"put {HEAD_TOKEN} in ~/.ray/auth_token, or set {TOKEN_ENV} or {TOKEN_PATH_ENV}"
_VERSIONS = re.compile(r"started with:\s*Ray: (\S+)\s*Python: (\S+)\s*This process.*?started with:\s*"
                       r"Ray: (\S+)\s*Python: (\S+)", re.S)
_AUTH_WORDS = ("InvalidAuthToken", "authentication token is missing", "no authentication token was found",
               "Unauthenticated")


def token_source() -> str | None:
    """Where Ray would read this machine's token, in Ray's order (None: nowhere)."""
    if os.environ.get(TOKEN_ENV, "").strip():
        return TOKEN_ENV
    path = os.environ.get(TOKEN_PATH_ENV)
    if path:
        if not _readable_token(Path(path).expanduser()):
            raise ShiftbenchError(f"{TOKEN_PATH_ENV}={path}: no Ray token there (the file is missing, unreadable "
                                  f"or empty); put {HEAD_TOKEN} in it, or unset {TOKEN_PATH_ENV}")
        return f"{TOKEN_PATH_ENV} ({path})"
    return "~/.ray/auth_token" if _readable_token(Path.home() / ".ray" / "auth_token") else None


def _readable_token(path: Path) -> bool:
    try:
        return bool(path.read_text().strip())
    except OSError:
        return False


def token_auth(address: str, quiet: bool = True) -> str | None:
    """Token authentication for joining ``address``, matched to the cluster's; returns where the token is read
    (None: no token is sent). Refuses, in one line, a cluster that would refuse this driver.

    ``RAY_AUTH_MODE`` set by the user stands. Unset, the cluster is asked once without a token: one that answers
    gets none (a driver in token mode cannot run actors on a cluster without authentication: the cluster's
    workers, which have no token, cannot call it back); one that asks for a token gets this machine's."""
    mode = os.environ.get(AUTH_MODE_ENV)
    if mode is None:
        refused = auth_refusal(address, quiet)
        if refused is None:
            return None
        source = token_source()
        if source is not None and not _enable_token_mode():
            raise ShiftbenchError(f"--address {address}: the cluster requires a Ray token: set {AUTH_MODE_ENV}=token "
                                  f"to send this machine's (from {source})")
        if source is None:
            raise ShiftbenchError(refusal(address, refused, None))
    elif mode.strip().lower() == "token":
        source = token_source()
        if source is None:
            raise ShiftbenchError(f"{AUTH_MODE_ENV}=token but this machine has no Ray token: {MISSING}")
    else:
        source = None
    refused = auth_refusal(address, quiet)
    if refused is not None:
        raise ShiftbenchError(refusal(address, refused, source))
    return source


def _enable_token_mode() -> bool:
    """Token mode on in this process (the environment and Ray's cached config), by Ray's own switch, the
    one `ray start --head` calls; False where this Ray has none."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available as enable,
        )
    except ImportError:
        return False
    logger = logging.getLogger(enable.__module__)  # its notice that token mode is on: not the user's business
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return bool(enable(warn_if_disabled=False))
    finally:
        logger.setLevel(level)


def auth_refusal(address: str, quiet: bool = True) -> BaseException | None:
    """One call to the cluster's GCS, as ``ray status`` makes it: Ray's authentication refusal, if any, in
    milliseconds (``ray.init`` retries it for 20 seconds and logs each try). Anything else is left to
    ``ray.init`` to say."""
    if "://" in address:
        return None  # Ray Client (ray://): another server, another protocol
    try:
        from ray._raylet import GcsClient
    except ImportError:
        return None
    with _stderr_silenced(quiet):  # Ray's C++ client logs each failed call on the process's stderr
        try:
            GcsClient(address=address)
        except Exception as exc:  # noqa: BLE001: only authentication is judged here
            if is_auth_refusal(exc):
                return exc
    return None


@contextlib.contextmanager
def _stderr_silenced(enabled: bool) -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2) if enabled else None
    except (OSError, ValueError):  # no stderr to silence
        saved = None
    if saved is None:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def is_auth_refusal(exc: BaseException) -> bool:
    chain = list(_chain(exc))
    text = " ".join(str(e) for e in chain).lower()
    return (any(type(e).__name__ == "AuthenticationError" for e in chain)
            or any(word.lower() in text for word in _AUTH_WORDS))


def refusal(address: str, exc: BaseException, token: str | None) -> str:
    """One line: why ``ray.init(address)`` (or the probe) refused to join, and what to do."""
    where = f"--address {address}"
    text = "\n".join(str(e) for e in _chain(exc))
    if "Version mismatch" in text:
        found = _VERSIONS.search(text)
        versions = (f"the cluster runs Ray {found[1]} on Python {found[2]}, this machine Ray {found[3]} on "
                    f"Python {found[4]}" if found else _first_line(text))
        return (f"{where}: Ray version mismatch: {versions}; install the cluster's Ray and Python versions here "
                "(Ray requires the driver and the cluster to match)")
    if is_auth_refusal(exc):
        mode = os.environ.get(AUTH_MODE_ENV, "").strip().lower()
        if token is None and mode not in ("", "token"):
            return (f"{where}: the cluster requires a Ray token (token authentication) and {AUTH_MODE_ENV}={mode} "
                    f"here: unset it or set {AUTH_MODE_ENV}=token (with {HEAD_TOKEN} in ~/.ray/auth_token)")
        if token is None:
            return (f"{where}: the cluster requires a Ray token (token authentication) and this machine has "
                    f"none: {MISSING}")
        return f"{where}: the cluster refused this machine's Ray token (from {token}): use {HEAD_TOKEN}"
    return f"{where}: could not join a Ray cluster ({_first_line(text)})"


def join(ray: Any, address: str, options: dict[str, Any], quiet: bool = True) -> None:
    """``ray.init(address=...)`` with the token set up and the cluster probed first; a refusal is one line.
    ``auto`` (the cluster this machine runs) is Ray's own case: it sets the token up itself."""
    token = token_auth(address, quiet) if address != "auto" else None
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, TimeoutError, ray.exceptions.RayError) as exc:
        with contextlib.suppress(Exception):
            ray.shutdown()  # a half-made connection (the version check comes after the node is joined)
        raise ShiftbenchError(refusal(address, exc, token)) from None


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen = 0
    while exc is not None and seen < 8:
        yield exc
        seen += 1
        exc = exc.__cause__ or exc.__context__


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "no reason given"
