"""The layers point one way (pipeline -> models / evaluation / data_recipes, never back) and no module
imports itself through a circle: read from the source with ``ast``, so a lazy import inside a function
counts too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "models", "evaluation", "data_recipes", "serving", "common")
#: which of the project's packages each package may import
ALLOWED = {
    "pipeline": {"pipeline", "models", "evaluation", "data_recipes", "serving", "common"},
    # a bundle loads, and a gallery is indexed and searched, without the pipeline or a run tree
    "serving": {"serving", "models", "data_recipes", "evaluation", "common"},
    "models": {"models", "common"},
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


def test_the_engine_knows_nothing_of_the_project_s_settings():
    """The hashed task, its outputs, locks, lineage and processes import no module of ``pipeline.config`` (nor
    the tasks or the command line above it)."""
    graph = import_graph()
    reached = {
        f"{source} imports {target}"
        for source, targets in graph.items()
        if source.startswith("pipeline.engine")
        for target in targets
        if target.startswith(("pipeline.config", "pipeline.tasks", "pipeline.run", "pipeline.steps"))
    }
    assert reached == set()


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
