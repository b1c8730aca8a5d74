"""The layers point one way (pipeline -> models / evaluation / data_recipes, never back) and no module
imports itself through a circle: read from the source with ``ast``, so a lazy import inside a function
counts too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "models", "evaluation", "data_recipes", "serving", "common")
#: which of the project's packages each package may import
ALLOWED = {
    "pipeline": {"pipeline", "models", "evaluation", "data_recipes", "serving", "common"},
    # a bundle loads, and a gallery is indexed and searched, without the pipeline or a run tree
    "serving": {"serving", "models", "data_recipes", "evaluation", "common"},
    # a run's checkpoints are selected by evaluation's metrics (evaluation.selection_metrics): one entry each
    "models": {"models", "evaluation", "common"},
    "evaluation": {"evaluation", "common"},
    "data_recipes": {"data_recipes", "common"},
    # the bottom layer: atomic writes and the tokenizer
    "common": {"common"},
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
    """``pipeline/`` holds its entry points and five sub-packages (docs/architecture.md draws them)."""
    root = ROOT / "pipeline"
    loose = sorted(p.name for p in root.iterdir() if p.is_file() and p.name not in {"__init__.py", "__main__.py"})
    assert loose == []
    packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").exists())
    assert packages == ["config", "engine", "run", "steps", "tasks"]


#: what the engine may not import or name: the project above it (the hashed task, its outputs, locks, lineage
#: and processes are a library a project uses, and is told what it needs: a torchrun job, the packages to
#: fingerprint)
ABOVE_THE_ENGINE = ("pipeline.config", "pipeline.steps", "pipeline.tasks", "pipeline.run", "models", "evaluation", "serving", "data_recipes")
#: the layers of ``pipeline/``, bottom up: a module imports its own layer or one below (docs/architecture.md)
PIPELINE_LAYERS = ("engine", "steps", "config", "tasks", "run")


def _named(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_the_engine_imports_and_names_nothing_of_the_project():
    """No module of ``pipeline/engine/`` imports a module above it (lazily in a function or relatively either),
    nor names one in its text (a module run by name, a package list, a docstring's example)."""
    graph = import_graph()
    imported = sorted(
        f"{source} imports {target}"
        for source, targets in graph.items()
        if source.startswith("pipeline.engine")
        for target in targets
        if _named(target, ABOVE_THE_ENGINE)
    )
    relative = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "pipeline" / "engine").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level > 1
    )
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(name) for name in ABOVE_THE_ENGINE) + r")(?:\.\w+)*(?![\w])")
    named = sorted(
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in (ROOT / "pipeline" / "engine").rglob("*.py")
        for text in [path.read_text()]
        for match in pattern.finditer(text)
        if "." in match.group(0) or text[match.start() - 1 : match.start()] in "\"'"
    )
    assert (imported, relative, named) == ([], [], [])


def test_no_layer_of_the_pipeline_imports_one_above_it():
    """``run`` -> ``tasks`` -> ``config`` -> ``steps`` -> ``engine``: each imports its own layer or those below."""
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
    graph = {"pipeline.tasks.report": {"pipeline.run.status"}, "pipeline.engine.x": {"models.settings"}}
    monkeypatch.setattr(__import__(__name__, fromlist=["import_graph"]), "import_graph", lambda: graph)
    with pytest.raises(AssertionError, match="pipeline.tasks.report imports pipeline.run.status"):
        test_no_layer_of_the_pipeline_imports_one_above_it()
    with pytest.raises(AssertionError, match="pipeline.engine.x imports models.settings"):
        test_the_engine_imports_and_names_nothing_of_the_project()


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
