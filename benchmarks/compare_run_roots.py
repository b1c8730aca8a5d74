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

from common.bounded_json import read_bounded
from common.run_folder import declared_output, finished_outputs, meta_field

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


def differences(a: Any, b: Any, where: str = "", added_ok: bool = False) -> list[str]:
    """Where ``a`` and ``b`` differ; with ``added_ok`` a key only ``b`` has (a field added since) is not one."""
    if isinstance(a, dict) and isinstance(b, dict):
        extra = set(a) - set(b) if added_ok else set(a) ^ set(b)
        found = [f"{where}/{k}: only in one" for k in sorted(extra)]
        for key in sorted(set(a) & set(b)):
            found += differences(a[key], b[key], f"{where}/{key}", added_ok)
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{where}[{i}]", added_ok)
        ]
    return [] if a == b else [f"{where}: {str(a)[:80]} != {str(b)[:80]}"]


def point_of(params: dict[str, str]) -> dict:
    """A run's changes to its variant as its ``_meta.json`` keeps them (``point`` since 1.0; a root made before
    by ``variant_overrides``): the roots compared may come from either side of that change."""
    return ast.literal_eval(params.get("point", params.get("variant_overrides")) or "{}")


def evaluations(root: Path, renames: list[tuple[str, str]], ignore_overrides: bool = False) -> dict[tuple, Any]:
    found = {}
    for folder in finished_outputs(root, "Evaluate"):
        params = meta_field(folder, "params")
        overrides = "" if ignore_overrides else str(point_of(params))
        key = (params["variant"], int(params["seed"]), overrides)
        found[key] = normalised(read_bounded(declared_output(folder, "metrics")), renames)
    return found


def newest_report(root: Path, renames: list[tuple[str, str]]) -> Any:
    reports = sorted(root.glob("Report/*/report.json"), key=lambda p: p.stat().st_mtime)
    if not reports:
        raise SystemExit(f"no Report/*/report.json under {root}")
    return normalised(read_bounded(reports[-1]), renames)


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rename", action="append", default=[], help="old=new: a key renamed between them")
    parser.add_argument(
        "--ignore-overrides",
        action="store_true",
        help="match evaluations by variant and seed only (the after root ran with --variant-overrides that "
        "restore the before root's behaviour, e.g. a changed default set back)",
    )
    parser.add_argument(
        "--ignore-added-keys", action="store_true", help="a key only the after root has (a new field) is no difference"
    )
    args = parser.parse_args(argv)
    renames = [tuple(pair.split("=", 1)) for pair in args.rename]
    before = evaluations(args.before, renames, args.ignore_overrides)
    after = evaluations(args.after, renames, args.ignore_overrides)
    problems = [f"Evaluate {key}: only in one root" for key in sorted(set(before) ^ set(after))]
    for key in sorted(set(before) & set(after)):
        problems += [f"Evaluate {key}{d}" for d in differences(before[key], after[key], added_ok=args.ignore_added_keys)]
        print(f"Evaluate {key[0]:<16} seed {key[1]}  {digest(before[key])}  {digest(after[key])}")
    report_a, report_b = newest_report(args.before, renames), newest_report(args.after, renames)
    if args.ignore_overrides:
        for report in (report_a, report_b):
            report.get("run", {}).pop("variant_overrides", None)
    print(f"report.json (volatile keys dropped)  {digest(report_a)}  {digest(report_b)}")
    problems += [f"report.json{d}" for d in differences(report_a, report_b, added_ok=args.ignore_added_keys)]
    for problem in problems:
        print("DIFFERS", problem)
    print(f"{len(before)} evaluations compared; {'equal' if not problems else f'{len(problems)} differences'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
