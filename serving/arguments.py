"""What ``crossmodal`` checks before any work: every argument value argparse cannot check by type alone, and
the address ``serve`` listens on (bound before anything is printed as served)."""

from __future__ import annotations

import argparse
import math
import socket
from pathlib import Path

#: uvicorn's log levels (``--log-level``)
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
#: the largest ``--max-upload-mb``: an upload is held in memory while it is decoded
MAX_UPLOAD_MB = 1024.0


class ArgumentProblem(ValueError):
    """A command-line value that cannot work, found before any work is done."""


def check_arguments(args: argparse.Namespace) -> None:
    """Every value argparse cannot check by type alone, checked before anything is loaded or embedded."""
    problems = []
    if args.command == "serve":
        problems += serve_problems(args)
    if args.command == "search":
        from serving.search import MAX_K

        if not 1 <= args.k <= MAX_K:
            problems.append(f"-k must be from 1 to {MAX_K}, got {args.k}")
    # audit's --k, --weights and --flag-share are checked by AuditSettings and audit() before any work
    if args.command == "audit":
        if args.top < 0:
            problems.append(f"--top must be >= 0, got {args.top}")
        if not all(math.isfinite(w) for w in args.weights):
            problems.append(f"--weights must be finite numbers, got {' '.join(str(w) for w in args.weights)}")
    if args.command == "evaluate":
        if args.redraws < 1:
            problems.append(f"--redraws must be >= 1, got {args.redraws}")
        if any(k < 1 for k in args.recall_k):
            problems.append(f"--recall-k must be positive integers, got {args.recall_k}")
    if args.command in ("evaluate", "audit", "index") and getattr(args, "table", None):
        if not Path(args.table).is_file():
            problems.append(f"no table at {args.table}")
    if problems:
        raise ArgumentProblem("; ".join(problems))


def serve_problems(args: argparse.Namespace) -> list[str]:
    """What ``serve`` would crash on or refuse after loading the index: found before anything is loaded."""
    from serving.access import AccessError, check_allowed_host, check_token, chosen_token, is_loopback

    problems = []
    if not 0 <= args.port <= 65535:
        problems.append(f"--port must be from 0 to 65535, got {args.port}")
    mb = args.max_upload_mb
    # inf would overflow the byte count, nan compares false with everything, a tiny value rounds to 0 bytes
    if not (math.isfinite(mb) and 0 < mb <= MAX_UPLOAD_MB and int(mb * 1024 * 1024) >= 1):
        problems.append(f"--max-upload-mb must be a positive number of megabytes up to {MAX_UPLOAD_MB:g}, got {mb}")
    if args.log_level.lower() not in LOG_LEVELS:
        problems.append(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {args.log_level!r}")
    token, source = chosen_token(args.token)
    try:
        if token is not None:
            check_token(token, source)
    except AccessError as error:
        problems.append(str(error))
    for name in args.allowed_host or []:
        try:
            check_allowed_host(name)
        except AccessError as error:
            problems.append(str(error))
    if args.absolute_paths and not is_loopback(args.host):
        problems.append(
            f"--absolute-paths shows where the gallery's files live: only for a server on the loopback interface, "
            f"not --host {args.host}"
        )
    if not args.host.strip():
        problems.append("--host is empty: give an address such as 127.0.0.1 or 0.0.0.0")
    else:
        try:
            socket.getaddrinfo(args.host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as error:  # a long label fails IDNA encoding with UnicodeError
            problems.append(f"--host {args.host[:80]!r} is not an address this machine can listen on ({error})")
    return problems


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: any free one), or a one-line error (the address in use, a
    host that does not resolve) before anything is printed as served."""
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listening = socket.socket(family, kind, protocol)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
    except (OSError, UnicodeError) as error:
        raise ServeError(f"cannot listen on {host}:{port}: {getattr(error, 'strerror', None) or error}") from None
    return listening


class ServeError(OSError):
    """The server cannot listen where it was asked to."""
