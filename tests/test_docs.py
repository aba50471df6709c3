"""The documentation site (``mkdocs.yml``, built by ``make docs``): every page of docs/ is in the nav and every nav
entry is a page, and every package of ``lightning_tf`` (and each of its top-level modules) has an API page. The
checks read files only; the build itself (``mkdocs build --strict``: links, anchors, docstrings) is ``make docs``.
Each checker also runs on a tiny synthetic site, so the checks can fail."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


class _ConfigLoader(yaml.SafeLoader):
    """mkdocs.yml as plain data: its ``!!python/...`` tags (a function MkDocs calls) read as None."""


_ConfigLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def read_config(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_ConfigLoader)


def nav_entries(nav: Any) -> list[str]:
    """The page paths of a nav, in order: a nav is a list of paths, of {title: path} and of {section: nav}."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [entry for item in nav for entry in nav_entries(item)]
    if isinstance(nav, dict):
        return [entry for value in nav.values() for entry in nav_entries(value)]
    raise TypeError(f"nav entry {nav!r} is neither a path, a list nor a titled entry")


def nav_problems(config: dict[str, Any], docs: Path) -> list[str]:
    """What keeps the nav and the pages of ``docs`` from being one and the same list."""
    entries = nav_entries(config["nav"])
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")}
    problems = [f"{page}: a page of docs/ that is not in mkdocs.yml's nav" for page in sorted(pages - set(entries))]
    problems += [
        f"{entry}: in mkdocs.yml's nav, but docs/{entry} does not exist" for entry in entries if entry not in pages
    ]
    problems += [
        f"{entry}: in mkdocs.yml's nav {entries.count(entry)} times"
        for entry in sorted(set(entries))
        if entries.count(entry) > 1
    ]
    return problems


def documented_modules(api: Path) -> set[str]:
    """The identifiers the API pages render (``::: lightning_tf.core``)."""
    return {m for page in api.glob("*.md") for m in re.findall(r"^::: *(\S+)", page.read_text(encoding="utf-8"), re.M)}


def public_modules(package: Path) -> set[str]:
    """The packages below ``package`` and its own top-level modules (``__main__`` and ``_private`` ones aside)."""
    name = package.name
    packages = {
        ".".join(init.parent.relative_to(package.parent).parts)
        for init in package.rglob("__init__.py")
        if init.parent != package and not any(part.startswith("_") for part in init.parent.relative_to(package).parts)
    }
    modules = {f"{name}.{f.stem}" for f in package.glob("*.py") if not f.stem.startswith("_")}
    return packages | modules


def api_problems(package: Path, api: Path) -> list[str]:
    expected, documented = public_modules(package), documented_modules(api)
    problems = [f"{m}: no page of docs/api/ renders it ('::: {m}')" for m in sorted(expected - documented)]
    problems += [
        f"{m}: rendered by docs/api/, but not a public package or module" for m in sorted(documented - expected)
    ]
    return problems


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    assert nav_problems(read_config(ROOT / "mkdocs.yml"), DOCS) == []


def test_every_package_and_top_level_module_has_an_api_page() -> None:
    assert api_problems(ROOT / "lightning_tf", DOCS / "api") == []


def test_the_site_config_reads_with_its_python_tags() -> None:
    config = read_config(ROOT / "mkdocs.yml")
    assert config["docs_dir"] == "docs" and config["site_dir"] == "site"
    assert "results/gpu.md" in nav_entries(config["nav"]) and "api/core.md" in nav_entries(config["nav"])


def test_the_nav_checker_finds_a_page_left_out_a_missing_page_and_a_repeated_one(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    for page in ("index.md", "guide.md", "results/a.md"):
        (tmp_path / page).write_text("# page\n")
    nav = [{"Home": "index.md"}, {"Results": ["results/a.md", "results/gone.md"]}, {"Again": "index.md"}]
    assert nav_problems({"nav": nav}, tmp_path) == [
        "guide.md: a page of docs/ that is not in mkdocs.yml's nav",
        "results/gone.md: in mkdocs.yml's nav, but docs/results/gone.md does not exist",
        "index.md: in mkdocs.yml's nav 2 times",
    ]
    assert nav_problems({"nav": ["index.md", "guide.md", {"Results": ["results/a.md"]}]}, tmp_path) == []


def test_the_nav_checker_names_an_entry_it_cannot_read() -> None:
    with pytest.raises(TypeError, match=r"nav entry 3 is neither a path, a list nor a titled entry"):
        nav_entries([{"Home": "index.md"}, 3])


def test_the_api_checker_finds_a_package_without_a_page_and_a_page_of_nothing(tmp_path: Path) -> None:
    package, api = tmp_path / "pkg", tmp_path / "api"
    for folder in (package / "sub" / "inner", package / "other", package / "_private", api):
        folder.mkdir(parents=True, exist_ok=True)
    for init in (package, package / "sub", package / "sub" / "inner", package / "other", package / "_private"):
        (init / "__init__.py").write_text("")
    (package / "tool.py").write_text("")
    (package / "__main__.py").write_text("")
    (api / "sub.md").write_text("# pkg.sub\n\n::: pkg.sub\n\n::: pkg.sub.inner\n    options:\n      a: 1\n")
    (api / "gone.md").write_text("::: pkg.gone\n")
    assert api_problems(package, api) == [
        "pkg.other: no page of docs/api/ renders it ('::: pkg.other')",
        "pkg.tool: no page of docs/api/ renders it ('::: pkg.tool')",
        "pkg.gone: rendered by docs/api/, but not a public package or module",
    ]


def _docs_module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def computed_all(package: Path) -> set[str]:
    """The packages whose ``__init__`` computes ``__all__`` (``sorted(_WHERE)``) rather than writing a list."""
    computed = set()
    for init in package.rglob("__init__.py"):
        for node in ast.parse(init.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and not isinstance(
                node.value, ast.List
            ):
                computed.add(".".join(init.parent.relative_to(package.parent).parts))
    return computed


def test_the_api_pages_list_each_package_s_names_as_importing_it_does() -> None:
    """Griffe reads a literal ``__all__`` itself; the extension gives it the computed ones (``sorted(_WHERE)``), read
    from the package at run time (cheap: their names load on first use)."""
    griffe = pytest.importorskip("griffe", reason="the docs extra (make install) brings griffe")
    extension = _docs_module("griffe_extensions").ComputedExports()
    package = griffe.load("lightning_tf", search_paths=[str(ROOT)], extensions=griffe.load_extensions(extension))
    computed = computed_all(ROOT / "lightning_tf")
    assert {"lightning_tf.kline", "lightning_tf.training", "lightning_tf.serve"} <= computed
    for name in sorted(computed):
        exports = package[name.removeprefix("lightning_tf.")].exports
        assert exports and sorted(exports) == sorted(importlib.import_module(name).__all__), name


def test_rest_roles_and_simple_tables_read_as_markdown() -> None:
    pytest.importorskip("griffe", reason="the docs extra (make install) brings griffe")
    markup = _docs_module("griffe_extensions")
    text = (
        "A :class:`Encoder` of :func:`~lightning_tf.core.causal_mask`:\n\n====  ====\nB     batch\n====  ====\n\nAfter."
    )
    assert markup._tables_as_text(markup._ROLE.sub(r"`\1`", text)) == (
        "A `Encoder` of `lightning_tf.core.causal_mask`:\n\n\n```text\n====  ====\nB     batch\n====  ====\n```\n\n\nAfter."
    )


def test_the_readme_links_work_on_the_site() -> None:
    """The README's links into docs/ become the site's; a page's ../README.md is the site's README page."""
    pytest.importorskip("mkdocs", reason="the docs extra (make install) brings MkDocs")
    hooks = _docs_module("hooks")
    readme = "[a](docs/text.md#x), [b](configs/kline/x.yaml), [c](https://example.org/a.md), [d](#the-three-tasks)"
    assert hooks._LINK.sub(hooks._relink, readme) == (
        "[a](text.md#x), b (`configs/kline/x.yaml`), [c](https://example.org/a.md), [d](#the-three-tasks)"
    )
    page = "the [README](../README.md#the-three-tasks); from results/: [README](../../README.md)"
    assert hooks.on_page_markdown(page, None, None, None) == (
        "the [README](readme.md#the-three-tasks); from results/: [README](../readme.md)"
    )
