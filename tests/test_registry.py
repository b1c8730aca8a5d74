"""The one name table (``common.registry.Registry``) behind losses, models, dataset recipes and search
backends: registration with tags, a name taken twice, the one "unknown name" message, deprecated spellings
and lazy module loading; and that each of the four users is backed by it."""

from __future__ import annotations

import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.registry import Registry, UnknownNameError, import_submodules


@pytest.fixture
def colors() -> Registry[str]:
    registry: Registry[str] = Registry("color")
    registry.add("red", "#f00", warm=True)
    registry.add("orange", "#fa0", warm=True)
    registry.add("blue", "#00f", warm=False)
    return registry


def test_register_get_and_names_by_tag() -> None:
    registry: Registry[object] = Registry("thing")

    @registry.register("square", sides=4)
    def square() -> int:
        return 4

    registry.register("triangle", sides=3)(len)
    assert registry.get("square") is square and registry["triangle"] is len
    assert registry.names() == ("square", "triangle") and registry.names(sides=3) == ("triangle",)
    assert registry.names(sides=5) == () and registry.names(colour="red") == ()
    assert "square" in registry and "circle" not in registry and 4 not in registry
    assert sorted(registry) == list(registry) == ["square", "triangle"] and len(registry) == 2
    assert registry.items() == [("square", square), ("triangle", len)]
    assert registry.values() == [square, len]


def test_a_name_taken_by_another_entry_is_refused_and_the_same_entry_only_retagged() -> None:
    registry: Registry[object] = Registry("thing")
    registry.register("a", flag=True)(len)
    registry.register("a", flag=False)(len)  # the same object again is no clash
    assert registry.names(flag=False) == ("a",) and registry.names(flag=True) == ()
    with pytest.raises(ValueError, match=r"thing name 'a' is registered twice \(len, str\)"):
        registry.register("a")(str)
    assert registry.get("a") is len


def test_an_unknown_name_says_what_is_close_and_what_exists(colors: Registry[str]) -> None:
    with pytest.raises(UnknownNameError) as error:
        colors.get("oragne")
    assert isinstance(error.value, KeyError)
    assert str(error.value) == "unknown color 'oragne'; did you mean 'orange'? available: blue, orange, red"
    with pytest.raises(KeyError) as error:
        colors["zzz"]  # nothing close: no guess
    assert str(error.value) == "unknown color 'zzz'; available: blue, orange, red"
    assert Registry("empty").unknown_message("x") == "unknown empty 'x'; available: (none)"


def test_a_deprecated_name_resolves_to_its_new_entry_with_a_warning(colors: Registry[str]) -> None:
    colors.deprecate("scarlet", "red")
    with pytest.warns(DeprecationWarning, match="'scarlet' is deprecated: use 'red'"):
        assert colors.get("scarlet") == colors.get("red")
    with pytest.warns(DeprecationWarning, match="'scarlet' is deprecated: use 'red'"):
        assert colors["scarlet"] == "#f00"
    # code that hashes a name gets one canonical spelling either way
    with pytest.warns(DeprecationWarning):
        assert colors.resolve("scarlet") == colors.resolve("red") == "red"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        colors.resolve("red")  # the canonical name does not warn
    assert "scarlet" in colors and "scarlet" not in colors.names() and len(colors) == 3
    with pytest.raises(ValueError, match="deprecated spelling"):
        colors.add("scarlet", "#f01")
    with pytest.raises(ValueError, match="is registered"):
        colors.deprecate("blue", "red")
    with pytest.raises(ValueError, match="itself deprecated"):
        colors.deprecate("crimson", "scarlet")


def test_a_deprecated_name_whose_new_name_is_missing_is_unknown(colors: Registry[str]) -> None:
    colors.deprecate("teal", "cyan")
    assert "teal" not in colors
    with pytest.raises(UnknownNameError, match="unknown color 'teal'"):
        colors.get("teal")


@pytest.fixture
def lazy_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package ``lazy_things`` whose ``THINGS`` is filled by ``lazy_things.shapes`` on first lookup."""
    package = tmp_path / "lazy_things"
    package.mkdir()
    (package / "__init__.py").write_text(
        'from common.registry import Registry\nTHINGS = Registry("thing", modules=("lazy_things.shapes",))\n'
    )
    (package / "shapes.py").write_text(
        textwrap.dedent(
            """
            from lazy_things import THINGS

            @THINGS.register("cube", sides=6)
            class Cube:
                pass
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "lazy_things"
    for name in [name for name in sys.modules if name.split(".")[0] == "lazy_things"]:
        del sys.modules[name]


def test_modules_are_imported_on_the_first_lookup_only(lazy_package: str) -> None:
    package = __import__(lazy_package)
    assert f"{lazy_package}.shapes" not in sys.modules  # building the registry imports nothing
    assert "cube" in package.THINGS
    assert f"{lazy_package}.shapes" in sys.modules
    assert package.THINGS.get("cube").__name__ == "Cube" and package.THINGS.names(sides=6) == ("cube",)


def test_a_failed_lazy_import_fails_again_at_the_next_lookup() -> None:
    registry: Registry[object] = Registry("thing", modules=("no_such_module_of_the_project",))
    for _ in range(2):
        with pytest.raises(ModuleNotFoundError):
            registry.names()


def test_import_submodules_skips_helpers_and_private_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "scanned_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in ("one", "helper", "_private"):
        (package / f"{name}.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        imported = __import__("scanned_pkg")
        import_submodules("scanned_pkg", imported.__path__, skip=("helper",))
        assert "scanned_pkg.one" in sys.modules
        assert "scanned_pkg.helper" not in sys.modules and "scanned_pkg._private" not in sys.modules
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] == "scanned_pkg"]:
            del sys.modules[name]


def test_losses_models_recipes_and_backends_share_the_one_registry() -> None:
    from data_recipes import RECIPES
    from data_recipes.registry import RECIPE_BUILDERS
    from evaluation.selection_metrics import SELECTION_METRICS
    from models.backbones import BACKBONES
    from models.losses import LOSSES, build_loss
    from models.registry import MODELS, model_class
    from pipeline.config.profiles import PROFILES
    from pipeline.config.variants import VARIANTS
    from serving.backends import APPROXIMATE_BACKENDS, BACKENDS, SEARCH_BACKENDS, choose_backend
    from serving.graph_search import HnswSearch

    registries = (LOSSES, MODELS, RECIPE_BUILDERS, SEARCH_BACKENDS, VARIANTS, PROFILES, BACKBONES, SELECTION_METRICS)
    for registry in registries:
        assert isinstance(registry, Registry)
    assert RECIPES == RECIPE_BUILDERS.names() and {"vse", "pvse"} <= set(MODELS)
    assert LOSSES["angular"].name == "angular" and model_class("vse") is MODELS["vse"]
    assert BACKENDS == ("auto", "exact", "annoy", "hnsw", "pq")
    # the backends kept in a file beside the vectors are the approximate ones of the table
    assert set(APPROXIMATE_BACKENDS) == set(SEARCH_BACKENDS.names(approximate=True))
    assert SEARCH_BACKENDS["hnsw"] is HnswSearch, "the table holds the classes"
    with pytest.raises(KeyError, match="unknown loss 'angualr'; did you mean 'angular'\\? available: "):
        build_loss("angualr")
    with pytest.raises(KeyError, match="unknown model 'vs'; did you mean 'vse'\\? available: pvse, vse"):
        model_class("vs")
    with pytest.raises(ValueError, match="'hsnw': did you mean 'hnsw'\\? choose one of auto, exact, annoy"):
        choose_backend(5, backend="hsnw")
