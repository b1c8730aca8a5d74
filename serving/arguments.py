"""What ``crossmodal`` checks before any work: every argument value argparse cannot check by type alone, and
the address ``serve`` listens on (bound before anything is printed as served)."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

#: uvicorn's log levels (``--log-level``)
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


class ArgumentProblem(ValueError):
    """A command-line value that cannot work, found before any work is done."""


def check_arguments(args: argparse.Namespace) -> None:
    """Every value argparse cannot check by type alone, checked before anything is loaded or embedded."""
    problems = []
    if args.command == "serve":
        if not 0 <= args.port <= 65535:
            problems.append(f"--port must be from 0 to 65535, got {args.port}")
        if not args.max_upload_mb > 0:
            problems.append(f"--max-upload-mb must be positive, got {args.max_upload_mb}")
        if args.log_level.lower() not in LOG_LEVELS:
            problems.append(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {args.log_level!r}")
    if args.command == "search":
        from serving.search import MAX_K

        if not 1 <= args.k <= MAX_K:
            problems.append(f"-k must be from 1 to {MAX_K}, got {args.k}")
    # audit's --k, --weights and --flag-share are checked by AuditSettings and audit() before any work
    if args.command == "audit" and args.top < 0:
        problems.append(f"--top must be >= 0, got {args.top}")
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


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: any free one), or a one-line error (the address in use, a
    host that does not resolve) before anything is printed as served."""
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listening = socket.socket(family, kind, protocol)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
    except OSError as error:
        raise ServeError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    return listening


class ServeError(OSError):
    """The server cannot listen where it was asked to."""
