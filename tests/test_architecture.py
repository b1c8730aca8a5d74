"""The layers point one way (pipeline -> models / evaluation / data_recipes -> common -> task_engine, never back)
and no module imports itself through a circle: read from the source with ``ast``, so a lazy import inside a
function counts too. The engine imports alone: a fresh interpreter imports every module of it without torch
and without any other package of the project."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "models", "evaluation", "data_recipes", "serving", "common", "task_engine")
#: which of the project's packages each package may import
ALLOWED = {
    "pipeline": {"pipeline", "models", "evaluation", "data_recipes", "serving", "common", "task_engine"},
    # a bundle loads, and a gallery is indexed and searched, without the pipeline or a run tree
    "serving": {"serving", "models", "data_recipes", "evaluation", "common"},
    # a run's checkpoints are selected by evaluation's metrics (evaluation.selection_metrics): one entry each
    "models": {"models", "evaluation", "common"},
    "evaluation": {"evaluation", "common"},
    "data_recipes": {"data_recipes", "common"},
    # atomic writes (the engine's) and the tokenizer
    "common": {"common", "task_engine"},
    # the bottom layer: hashed Luigi tasks, their outputs, code lineage and processes; no project module
    "task_engine": {"task_engine"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path) -> set[str]:
    """Modules of the project that ``path`` imports (``from a.b import c`` names ``a.b.c`` when that is a
    module, else ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(name for name in names if name.split(".")[0] in PACKAGES)
    return found


def import_graph() -> dict[str, set[str]]:
    files = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    modules = {module_name(path): path for path in files}
    graph = {}
    for name, path in modules.items():
        graph[name] = {target for target in project_imports(path) if target in modules and target != name}
    return graph


def test_packages_import_only_their_own_layer_or_below():
    upward = [
        f"{source} imports {target}"
        for source, targets in import_graph().items()
        for target in targets
        if target.split(".")[0] not in ALLOWED[source.split(".")[0]]
    ]
    assert upward == []


def test_no_import_circle():
    graph = import_graph()
    # a package's __init__ importing its own submodules is how registries discover them, not a circle
    edges = {
        source: {t for t in targets if not (source.count(".") == 0 or t.startswith(source + "."))}
        for source, targets in graph.items()
    }
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                circles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target, [*stack, target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert circles == []


#: the longest a module of the packages may be: a longer one does several jobs (split it by job)
MAX_MODULE_LINES = 400


def test_no_module_is_longer_than_the_limit():
    files = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in files
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}


def test_the_pipeline_folder_shows_the_design():
    """``pipeline/`` holds its entry points and four sub-packages (docs/architecture.md draws them)."""
    root = ROOT / "pipeline"
    loose = sorted(p.name for p in root.iterdir() if p.is_file() and p.name not in {"__init__.py", "__main__.py"})
    assert loose == []
    packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").exists())
    assert packages == ["config", "run", "steps", "tasks"]


#: what the engine may not import or name: the project above it (the hashed task, its outputs, locks, lineage
#: and processes are a library a project uses, and is told what it needs: a torchrun job, the packages to
#: fingerprint and the file of their versions)
ABOVE_THE_ENGINE = tuple(package for package in PACKAGES if package != "task_engine")
#: the layers of ``pipeline/``, bottom up: a module imports its own layer or one below (docs/architecture.md)
PIPELINE_LAYERS = ("steps", "config", "tasks", "run")


def _named(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_the_engine_imports_and_names_nothing_of_the_project():
    """No module of ``task_engine/`` imports a module of the project (lazily in a function or relatively either),
    nor names one in its text (a module run by name, a package list, a docstring's example)."""
    graph = import_graph()
    imported = sorted(
        f"{source} imports {target}"
        for source, targets in graph.items()
        if source.split(".")[0] == "task_engine"
        for target in targets
        if _named(target, ABOVE_THE_ENGINE)
    )
    relative = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "task_engine").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level > 1
    )
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(name) for name in ABOVE_THE_ENGINE) + r")(?:\.\w+)*(?![\w])")
    named = sorted(
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in (ROOT / "task_engine").rglob("*.py")
        for text in [path.read_text()]
        for match in pattern.finditer(text)
        if "." in match.group(0) or text[match.start() - 1 : match.start()] in "\"'"
    )
    assert (imported, relative, named) == ([], [], [])


def test_no_layer_of_the_pipeline_imports_one_above_it():
    """``run`` -> ``tasks`` -> ``config`` -> ``steps``: each imports its own layer or those below."""
    rank = {layer: i for i, layer in enumerate(PIPELINE_LAYERS)}

    def layer(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 2 and parts[0] == "pipeline" and parts[1] in rank else None

    upward = sorted(
        f"{source} imports {target}"
        for source, targets in import_graph().items()
        if layer(source) is not None
        for target in targets
        if layer(target) is not None and rank[layer(target)] > rank[layer(source)]
    )
    assert upward == []


def test_the_layer_test_sees_an_upward_import_and_a_named_module(tmp_path, monkeypatch):
    """The two checks above catch what they are for (a test that cannot fail proves nothing)."""
    graph = {"pipeline.tasks.report": {"pipeline.run.status"}, "task_engine.x": {"common.files"}}
    monkeypatch.setattr(__import__(__name__, fromlist=["import_graph"]), "import_graph", lambda: graph)
    with pytest.raises(AssertionError, match="pipeline.tasks.report imports pipeline.run.status"):
        test_no_layer_of_the_pipeline_imports_one_above_it()
    with pytest.raises(AssertionError, match="task_engine.x imports common.files"):
        test_the_engine_imports_and_names_nothing_of_the_project()


#: run by a fresh interpreter: torch cannot be imported (a finder refuses it), every module of the engine is,
#: and what it prints is every project package that was imported along the way (none may be)
IMPORT_ALONE = """
import importlib, json, pkgutil, sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"the engine imported {name}")
        return None

sys.meta_path.insert(0, NoTorch())
import task_engine
modules = [info.name for info in pkgutil.iter_modules(task_engine.__path__, "task_engine.")]
for name in modules:
    importlib.import_module(name)
project = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[1:]))
print(json.dumps({"modules": modules, "project": project}))
"""


def engine_import_alone(packages: tuple[str, ...]) -> dict:
    """What :data:`IMPORT_ALONE` reports, run in the repository by a new interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALONE, *packages], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_engine_imports_alone_without_torch_or_the_project():
    """Every module of ``task_engine`` imports in a fresh interpreter where importing torch fails, and afterwards
    no other package of the project is in ``sys.modules``: the engine is a library a project uses."""
    report = engine_import_alone(ABOVE_THE_ENGINE)
    assert {"task_engine.task", "task_engine.spawn", "task_engine.code_identity"} <= set(report["modules"])
    assert report["project"] == []


def test_the_import_check_sees_a_project_package_imported():
    """The same check names a project package when one is imported (here the engine itself, counted as one)."""
    assert engine_import_alone(("task_engine",))["project"] == ["task_engine"]


def test_the_engine_holds_no_data_of_the_project():
    """Only Python modules: the versions of the project's task families are the project's
    (``pipeline/tasks/code_versions.json``, :class:`task_engine.code_versions.CodeBase`)."""
    assert sorted({path.suffix for path in (ROOT / "task_engine").iterdir() if path.is_file()}) == [".py"]
    assert (ROOT / "pipeline" / "tasks" / "code_versions.json").is_file()


def test_one_spelling_of_neighbor():
    files = [
        path
        for folder in (*PACKAGES, "tests", "benchmarks", "docs")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in {".py", ".md", ".js", ".html", ".cfg"} and path != Path(__file__)
    ]
    files += [ROOT / "README.md", ROOT / "luigi.cfg", ROOT / "pyproject.toml"]
    british = "neighb" + "our"
    found = [str(path.relative_to(ROOT)) for path in files if british in path.read_text().lower()]
    assert found == []
