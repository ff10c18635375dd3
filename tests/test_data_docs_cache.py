"""Data Docs' compiled templates kept between processes (``$TOPIC_LINEAGE_TEMPLATE_CACHE``,
topic_lineage/quality/context.py): a view compiles a template once and stores it; a later view
(a later process's) loads it without compiling; ``off`` keeps none; a directory that cannot be
made only goes unused, and the page still renders."""

from __future__ import annotations

import pytest

from topic_lineage.quality import context as qc

PAGE = "page.j2"  # Great Expectations' Data Docs page template


@pytest.fixture
def views(monkeypatch):
    """A function making a new Great Expectations view (a new Jinja environment, as each Data
    Docs build makes) with the cache as the environment says."""
    from topic_lineage.quality.gx_import import import_gx

    import_gx()
    from great_expectations.render.view import DefaultJinjaPageView

    qc.use_template_cache()
    return DefaultJinjaPageView


def _template(view, name: str = PAGE):
    """``name`` as a view loads it to render a page (the environment's cache set first)."""
    return view._get_template(name)


def _refuse_to_compile(view) -> None:
    def compile_(*args, **kwargs):
        raise AssertionError("compiled a template the cache holds")

    view.env.compile = compile_


def test_a_template_compiled_once_is_loaded_by_the_next_view(views, tmp_path, monkeypatch):
    cache = tmp_path / "templates"
    monkeypatch.setenv(qc.TEMPLATE_CACHE_ENV, str(cache))
    first = views()
    assert _template(first).render is not None
    stored = sorted(path.name for path in cache.iterdir())
    assert stored, "nothing stored"

    later = views()
    _refuse_to_compile(later)  # a later process's view: loaded, not compiled
    assert _template(later).render is not None
    assert sorted(path.name for path in cache.iterdir()) == stored

    for path in cache.iterdir():  # damaged entries (a disk's fault): compiled again, not an error
        path.write_bytes(path.read_bytes()[:40])
    assert _template(views()).render is not None


def test_off_keeps_nothing_and_a_directory_that_cannot_be_made_changes_no_page(views, tmp_path, monkeypatch):
    monkeypatch.setenv(qc.TEMPLATE_CACHE_ENV, "off")
    view = views()
    _template(view)
    assert view.env.bytecode_cache is None

    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(qc.TEMPLATE_CACHE_ENV, str(blocked / "templates"))
    view = views()
    assert _template(view).render is not None  # compiled, not stored: no error
    assert view.env.bytecode_cache is not None
    assert blocked.read_text() == "not a directory"


def test_a_site_still_gives_its_views_the_projects_stylesheet(views, tmp_path):
    """GX makes each view from its site's configuration, passing the arguments the view's
    ``__init__`` names (the project's stylesheet directory, from the site's runtime
    environment): with the cache in place a view still gets it, and finds the stylesheet."""
    from great_expectations.data_context.util import instantiate_class_from_config

    styles = tmp_path / "styles"
    styles.mkdir()
    (styles / "data_docs_custom_styles.css").write_text(".fa-check-circle::before { content: 'passed'; }")
    view = instantiate_class_from_config(
        {"module_name": "great_expectations.render.view", "class_name": "DefaultJinjaPageView"},
        runtime_environment={"custom_styles_directory": str(styles)})
    assert view.custom_styles_directory == str(styles)
    _template(view)  # the cache in place; the page's ``{% include %}`` of the stylesheet:
    assert "content: 'passed'" in view.env.get_template("data_docs_custom_styles.css").render()
