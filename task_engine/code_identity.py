"""Which version of the project's code made an output, so that a rerun never takes yesterday's result as today's.

An output's path hashes its settings and its upstream outputs (``HashedTask.signature``), never the code. The
code is tracked beside it, by a version per task family recorded in the project's versions file
(:attr:`task_engine.code_versions.CodeBase.versions_file`):

* every output's ``_meta.json`` records its **code lineage**: the version of its own family and of every task
  family upstream of it. An output whose lineage differs from the current one is **stale**: ``complete()``
  is false, the task runs again in place (same path), and so does everything downstream (their lineage
  holds it). ``--keep-stale`` keeps stale outputs instead; the report then names them.
* each family's entry also holds a **fingerprint**: a hash of the source of every project module the task's
  module imports (docstrings, comments and formatting left out). ``tests/test_code_identity.py`` fails when a
  fingerprint no longer matches the code, and the maintainer decides: a change of what the task computes
  bumps its version (:func:`main` with ``--bump Train``, the project's command for it: its outputs and their
  downstream are recomputed), a refactor only records the new fingerprint (``--record``: nothing is recomputed).

Why not hash the source into the path (automatic, but every refactor or comment-free rename would retrain
the whole demo) and why not a version alone (forgotten the first time a loss changes): the fingerprint makes
the question impossible to miss, the version keeps the answer a human one. docs/architecture.md.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import inspect
import json
import pkgutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from task_engine.code_versions import code_base, recorded, version_of
from task_engine.task import HashedTask


# ---------------------------------------------------------------------------------------- fingerprints
def module_path(name: str) -> Path | None:
    """The source file of project module ``name`` (a package's ``__init__.py``), None outside the project."""
    base_of_code = code_base()
    if name.split(".")[0] not in base_of_code.packages:
        return None
    base = base_of_code.root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def imported_modules(name: str, path: Path) -> set[str]:
    """Project modules ``path`` imports (statically, lazy imports in functions included), modules it names as
    strings (imported by name), and every module of a package that imports its own submodules by scanning its
    folder (a registry such as the losses or the recipes)."""
    source = path.read_text()
    tree = ast.parse(source)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    module_name = code_base().module_pattern()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and module_name.fullmatch(node.value):
            found.add(node.value)  # a module imported by name (a registry's lazy list of its modules)
    if path.name == "__init__.py" and ("iter_modules" in source or "import_submodules" in source):
        found.update(f"{name}.{child.stem}" for child in path.parent.glob("*.py") if child.stem != "__init__")
        found.update(f"{name}.{child.name}" for child in path.parent.iterdir() if (child / "__init__.py").exists())
    return {module for module in found if module_path(module) is not None}


def closure(module: str) -> list[str]:
    """``module`` and every project module it reaches by imports, sorted."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        path = module_path(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        # only what a module names: a parent package's __init__ runs too, but ``pipeline/__init__`` imports
        # every task for Luigi, which would make every task's fingerprint the whole project's
        todo.extend(imported_modules(name, path) - seen)
    return sorted(seen)


def normalised_source(path: Path) -> str:
    """The module's syntax tree without docstrings: comments, formatting and documentation do not count."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def fingerprint(task_class: type) -> str:
    """A hash of the normalised source of every project module ``task_class``'s module reaches."""
    digest = hashlib.sha256()
    for name in closure(task_class.__module__):
        path = module_path(name)
        assert path is not None
        digest.update(name.encode() + b"\0" + normalised_source(path).encode() + b"\0")
    return digest.hexdigest()[:16]


def _defined(cls: type) -> set[str]:
    """Names defined by ``cls`` or a base below HashedTask."""
    return {name for klass in cls.__mro__ if klass is not HashedTask and issubclass(klass, HashedTask) for name in vars(klass)}


def task_families() -> dict[str, type]:
    """Every task family that writes an output (the HashedTask subclasses of the code base's tasks package), by
    name."""
    tasks = code_base().tasks_package
    package = importlib.import_module(tasks)
    for module in pkgutil.iter_modules(package.__path__, prefix=f"{tasks}."):
        importlib.import_module(module.name)  # every task module, so every family is a subclass by now
    families: dict[str, type] = {}
    todo = list(HashedTask.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        # a base class (no produce of its own) writes no output
        if cls.__module__.startswith(f"{tasks}.") and not inspect.isabstract(cls) and "produce" in _defined(cls):
            families[cls.get_task_family()] = cls
    return dict(sorted(families.items()))


def changed_families() -> dict[str, str]:
    """Families whose code no longer matches its recorded fingerprint: family -> what to do."""
    entries = recorded()["families"]
    changes = {}
    for family, cls in task_families().items():
        entry = entries.get(family)
        if entry is None:
            changes[family] = "not recorded"
        elif entry.get("fingerprint") != fingerprint(cls):
            changes[family] = f"code changed since version {entry['version']} was recorded"
    return changes


def write_versions(bump: Iterable[str] = ()) -> dict[str, Any]:
    """Record every family's current fingerprint; ``bump``: families whose version goes up by one."""
    families = task_families()
    bump = set(bump)
    unknown = bump - set(families)
    if unknown:
        raise SystemExit(f"error: unknown task famil{'y' if len(unknown) == 1 else 'ies'} {sorted(unknown)}; valid: {', '.join(families)}")
    entries = {}
    for family, cls in families.items():
        version = version_of(family) + (family in bump)
        entries[family] = {"version": version, "fingerprint": fingerprint(cls)}
    payload = {"python": f"{sys.version_info.major}.{sys.version_info.minor}", "families": entries}
    code_base().versions_file.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    recorded.cache_clear()
    return payload


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The maintainer's command, run by the project once it has declared its code base (:func:`task_engine.code_versions.configure`):
    list the families whose code changed, or record the decision (``--record`` / ``--bump FAMILY``)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Compare each task's code with its recorded fingerprint; record a refactor or bump a version.",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--record", action="store_true", help="the changes compute the same: record fingerprints only")
    group.add_argument("--bump", nargs="+", metavar="FAMILY", help="these families compute something else now: version + 1")
    args = parser.parse_args(argv)
    if args.record or args.bump:
        before = {f: version_of(f) for f in task_families()}
        payload = write_versions(args.bump or ())
        for family, entry in payload["families"].items():
            if entry["version"] != before[family]:
                print(f"{family}: version {before[family]} -> {entry['version']} (its outputs and their downstream are recomputed)")
        print(f"recorded {len(payload['families'])} fingerprints in {code_base().versions_file}")
        return 0
    changes = changed_families()
    for family, why in changes.items():
        print(f"{family}: {why}")
    if changes:
        print(
            "decide for each: --bump FAMILY ... if what it computes changed (its outputs are recomputed), "
            "--record if not (a refactor)"
        )
        return 1
    print("every task's code matches its recorded fingerprint")
    return 0
