"""Where a benchmark's results go: an optional JSON payload and an optional markdown table."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent


def commit(root: Path = REPOSITORY) -> str:
    """The repository's short commit, "+changes" when tracked files differ from it; "unknown" without git."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() + ("+changes" if dirty.stdout.strip() else "") if done.returncode == 0 else "unknown"


def write_results(
    payload: dict[str, Any], markdown: str, json_path: str | Path | None, markdown_path: str | Path | None
) -> None:
    """Write ``payload`` as indented JSON to ``json_path`` and ``markdown`` to ``markdown_path`` (each when
    given; folders made as needed)."""
    for path, text in ((json_path, json.dumps(payload, indent=2)), (markdown_path, markdown)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text + "\n")


def add_out_option(parser: argparse.ArgumentParser, default: Path) -> None:
    """``--out``: the results JSON (default ``default``; a ``--quick`` run writes none unless it is given)."""
    parser.add_argument("--out", type=Path, default=None, help=f"the results JSON (default {default}; --quick: none)")


def out_path(args: argparse.Namespace, default: Path) -> Path | None:
    """Where the results go: ``--out``, else ``default``, except after ``--quick`` (which proves the path, not the
    figures)."""
    return args.out or (None if args.quick else default)


def parse_with_quick(
    parser: argparse.ArgumentParser, argv: list[str] | None, default: Path | str, quick: dict[str, Any], what: str
) -> tuple[argparse.Namespace, Path | None]:
    """Add ``--quick`` (``what`` it runs: the smoke-test sizes in ``quick``, argument name -> value) and ``--out``,
    parse ``argv``, and return the arguments with the quick sizes applied and where the results go."""
    parser.add_argument("--quick", action="store_true", help=f"{what} (a smoke test)")
    add_out_option(parser, Path(default))
    args = parser.parse_args(argv)
    if args.quick:
        for name, value in quick.items():
            setattr(args, name, value)
    return args, out_path(args, Path(default))
