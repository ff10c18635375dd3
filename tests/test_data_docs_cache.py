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


def _refuse_to_compile(view) -> None:
    def compile_(*args, **kwargs):
        raise AssertionError("compiled a template the cache holds")

    view.env.compile = compile_


def test_a_template_compiled_once_is_loaded_by_the_next_view(views, tmp_path, monkeypatch):
    cache = tmp_path / "templates"
    monkeypatch.setenv(qc.TEMPLATE_CACHE_ENV, str(cache))
    first = views()
    assert first.env.get_template(PAGE).render is not None
    stored = sorted(path.name for path in cache.iterdir())
    assert stored, "nothing stored"

    later = views()
    _refuse_to_compile(later)  # a later process's view: loaded, not compiled
    assert later.env.get_template(PAGE).render is not None
    assert sorted(path.name for path in cache.iterdir()) == stored

    for path in cache.iterdir():  # damaged entries (a disk's fault): compiled again, not an error
        path.write_bytes(path.read_bytes()[:40])
    assert views().env.get_template(PAGE).render is not None


def test_off_keeps_nothing_and_a_directory_that_cannot_be_made_changes_no_page(views, tmp_path, monkeypatch):
    monkeypatch.setenv(qc.TEMPLATE_CACHE_ENV, "off")
    assert views().env.bytecode_cache is None

    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(qc.TEMPLATE_CACHE_ENV, str(blocked / "templates"))
    view = views()
    assert view.env.bytecode_cache is not None
    assert view.env.get_template(PAGE).render is not None  # compiled, not stored: no error
    assert blocked.read_text() == "not a directory"
