"""Are two run roots' results the same? Every Evaluate's ``metrics.json`` (matched by variant, seed and
overrides) and the Report's ``report.json`` are compared value for value, so a refactor can show it changed
no number.

What may differ between two runs of the same settings is left out: wall times and speeds, timestamps,
paths, output signatures and library versions (``VOLATILE``). ``--rename old=new`` maps a renamed key of the
older root to its new name first (any substring of a key or string: a spelling change). Exit 0 when
everything else is equal, 1 with the differing paths otherwise.

    python benchmarks/compare_run_roots.py /tmp/before_runs runs --rename old_name=new_name
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

#: keys whose values legitimately differ between two runs of the same settings
VOLATILE = re.compile(
    r"(wall_time|seconds|per_second|finished_at|signature|serve_command|version|_path$|^path$|file$|"
    r"train_dir|bundle_id|created_at|run_root|upstream)",
    re.IGNORECASE,
)


def normalised(value: Any, renames: list[tuple[str, str]]) -> Any:
    """``value`` with renamed keys mapped and volatile keys dropped (recursively)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            for old, new in renames:
                key = key.replace(old, new)
            if not VOLATILE.search(key):
                out[key] = normalised(item, renames)
        return out
    if isinstance(value, list):
        return [normalised(item, renames) for item in value]
    if isinstance(value, str):
        for old, new in renames:
            value = value.replace(old, new)
    return value


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        found = [f"{where}/{k}: only in one" for k in sorted(set(a) ^ set(b))]
        for key in sorted(set(a) & set(b)):
            found += differences(a[key], b[key], f"{where}/{key}")
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {str(a)[:80]} != {str(b)[:80]}"]


def evaluations(root: Path, renames: list[tuple[str, str]]) -> dict[tuple, Any]:
    found = {}
    for meta_path in sorted(root.glob("Evaluate/*/_meta.json")):
        params = json.loads(meta_path.read_text())["params"]
        key = (params["variant"], int(params["seed"]), str(ast.literal_eval(params["variant_overrides"] or "{}")))
        found[key] = normalised(json.loads((meta_path.parent / "metrics.json").read_text()), renames)
    return found


def newest_report(root: Path, renames: list[tuple[str, str]]) -> Any:
    reports = sorted(root.glob("Report/*/report.json"), key=lambda p: p.stat().st_mtime)
    if not reports:
        raise SystemExit(f"no Report/*/report.json under {root}")
    return normalised(json.loads(reports[-1].read_text()), renames)


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rename", action="append", default=[], help="old=new: a key renamed between them")
    args = parser.parse_args(argv)
    renames = [tuple(pair.split("=", 1)) for pair in args.rename]
    before, after = evaluations(args.before, renames), evaluations(args.after, renames)
    problems = [f"Evaluate {key}: only in one root" for key in sorted(set(before) ^ set(after))]
    for key in sorted(set(before) & set(after)):
        problems += [f"Evaluate {key}{d}" for d in differences(before[key], after[key])]
        print(f"Evaluate {key[0]:<16} seed {key[1]}  {digest(before[key])}  {digest(after[key])}")
    report_a, report_b = newest_report(args.before, renames), newest_report(args.after, renames)
    print(f"report.json (volatile keys dropped)  {digest(report_a)}  {digest(report_b)}")
    problems += [f"report.json{d}" for d in differences(report_a, report_b)]
    for problem in problems:
        print("DIFFERS", problem)
    print(f"{len(before)} evaluations compared; {'equal' if not problems else f'{len(problems)} differences'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
