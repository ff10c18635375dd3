"""Opening topic-lineage's Great Expectations file data context (``topic_lineage/quality/gx/``).

The context's configuration, suites, validation definitions and checkpoints are package data
(``gx/`` next to this module, in the wheel too; the repository's top-level ``expectations`` is a
symbolic link to it). The context is only read at run time: validation results and Data Docs
are written under ``tables.quality_dir()`` ($TOPIC_LINEAGE_HOME/quality), so the installed
package may be read-only (a Docker image).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from topic_lineage import tables as t

CONTEXT_ENV = "TOPIC_LINEAGE_GX_CONTEXT"
"""Overrides the directory of the GX context (default: the package's ``gx/``)."""

QUALITY_DIR_VARIABLE = "TOPIC_LINEAGE_QUALITY_DIR"
"""Substitution variable used by ``great_expectations.yml`` for generated output."""

DATASOURCE = "topic_lineage"
BATCH_DEFINITION = "whole_table"

SPARK, PANDAS = "spark", "pandas"
"""The engines a table is validated on: Spark DataFrames, or pandas DataFrames for a version
small enough to validate in process (``topic_lineage.quality.gate.in_process_limit``)."""
DATASOURCES = {SPARK: DATASOURCE, PANDAS: "topic_lineage_pandas"}
"""Engine -> the context's data source whose assets take that engine's DataFrames."""


def context_dir() -> Path:
    """The directory holding ``great_expectations.yml``."""
    configured = os.environ.get(CONTEXT_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return Path(__file__).resolve().parent / "gx"


def data_docs_dir() -> Path:
    return t.quality_dir() / "data_docs"


def data_docs_index() -> Path:
    """Great Expectations' own site index (its run list is drawn by CDN scripts; the UI serves
    a script-free index in its place, see ``topic_lineage.ui.data_docs``)."""
    return data_docs_dir() / "index.html"


def quality_link(link: str | Path) -> str | None:
    """A page of the quality directory (``file://`` URI or path) as a relative link.

    The gate report and the UI link Data Docs pages relative to ``quality_dir()`` (e.g.
    ``data_docs/validations/...html``), so the links work both from the files on disk and over
    http under the UI's ``/topic-lineage/data-docs/``, and never show a server path. ``None``
    for anything outside the quality directory or not a local file link.
    """
    text = str(link)
    parsed = urlparse(text)
    if parsed.scheme not in ("", "file") or (parsed.scheme == "file" and parsed.netloc):
        return None
    path = Path(unquote(parsed.path) if parsed.scheme else text)
    root = t.quality_dir().resolve()
    try:
        resolved = (root / path).resolve()
    except (OSError, ValueError, RuntimeError):
        return None
    if resolved == root or not resolved.is_relative_to(root):
        return None
    return resolved.relative_to(root).as_posix()


def overview_page() -> Path:
    """topic-lineage's self-contained overview of the gate runs: the page the CLI prints."""
    return t.quality_dir() / "index.html"


def gate_log() -> Path:
    """One JSON line per gate run (the overview page is rendered from it)."""
    return t.quality_dir() / "gate_runs.jsonl"


UI_PULL_EVERY_S = 10.0
"""With the home on object storage, how old the UI's copy of the gate's files may get before a
request brings it in step with the store again (:func:`pull_results`)."""
_pulled_at: float | None = None


def pull_results(*, unless_newer_than_s: float = 0) -> None:
    """With the home on object storage, bring the working copy's quality directory in step with
    the store: the gate runs, results and Data Docs pages other processes stored (a gate reads
    them before it adds its own; the UI before it shows them, at most every
    ``unless_newer_than_s`` seconds). With a local home, nothing."""
    import time

    from topic_lineage import storage

    global _pulled_at
    if _pulled_at is not None and time.monotonic() - _pulled_at < unless_newer_than_s:
        return
    storage.home().pull_tree(t.quality_dir())
    _pulled_at = time.monotonic()


def push_results() -> None:
    """With the home on object storage, store what a gate run wrote or removed in the quality
    directory (its log line, results, pages; what pruning removed). With a local home, nothing."""
    from topic_lineage import storage

    storage.home().push_tree(t.quality_dir())


def _engine_suffix(engine: str) -> str:
    if engine not in DATASOURCES:
        raise ValueError(f"unknown validation engine {engine!r}: one of {sorted(DATASOURCES)}")
    return "" if engine == SPARK else f"_{engine}"


def checkpoint_name(table: str, engine: str = SPARK) -> str:
    """The checkpoint of a table on an engine: same suite and result format on each."""
    return f"{table}_gate{_engine_suffix(engine)}"


def validation_definition_name(table: str, engine: str = SPARK) -> str:
    return f"{table}_validation{_engine_suffix(engine)}"


TEMPLATE_CACHE_ENV = "TOPIC_LINEAGE_TEMPLATE_CACHE"
"""Where Data Docs' compiled page templates are kept between processes: a directory, or ``off``
(default: ``var/topic-lineage/templates`` in the Python installation, the virtualenv)."""


def template_cache_dir() -> Path | None:
    """The directory of :data:`TEMPLATE_CACHE_ENV`; ``None`` when it is ``off``."""
    from topic_lineage.fsutil import installation_dir

    if os.environ.get(TEMPLATE_CACHE_ENV, "").strip().lower() == "off":
        return None
    return installation_dir(TEMPLATE_CACHE_ENV, default_name="templates")


def use_template_cache() -> None:
    """Give the Jinja environments Great Expectations renders Data Docs with (one per view: every
    build of the docs compiled its ~100 templates again, 0.6 s of a gate's 1.2 s of docs on 2
    cores) a bytecode cache in :func:`template_cache_dir`: a process loads what an earlier one
    compiled. Jinja keys each entry by the template's name and checks its source and the
    Python version, so an upgrade of either compiles afresh. A directory that cannot be written
    only goes unused for writing: the cache saves time, and its absence changes no page."""
    from great_expectations.render.view import view

    if getattr(view.DefaultJinjaView, "_topic_lineage_cached", False):
        return
    # Not by wrapping __init__: GX passes a view the arguments its __init__ names
    # (custom_styles_directory, from its site's runtime environment), read off its signature.
    get_template = view.DefaultJinjaView._get_template

    def cached_get_template(self, template_str: str):
        self.env.bytecode_cache = _template_cache(template_cache_dir())
        return get_template(self, template_str)

    view.DefaultJinjaView._get_template = cached_get_template
    view.DefaultJinjaView._topic_lineage_cached = True


_TEMPLATE_CACHES: dict = {}


def _template_cache(where: Path | None):
    """The bytecode cache in ``where`` (one per directory), or ``None``."""
    if where is None:
        return None
    if where not in _TEMPLATE_CACHES:
        import jinja2

        class TemplateCache(jinja2.FileSystemBytecodeCache):
            def load_bytecode(self, bucket) -> None:
                try:
                    super().load_bytecode(bucket)
                except Exception:  # noqa: BLE001 -- unreadable or damaged: compiled instead
                    bucket.reset()

            def dump_bytecode(self, bucket) -> None:
                try:
                    Path(self.directory).mkdir(parents=True, exist_ok=True)
                    super().dump_bytecode(bucket)
                except OSError:
                    pass  # not writable here: compiled again next time

        _TEMPLATE_CACHES[where] = TemplateCache(str(where))
    return _TEMPLATE_CACHES[where]


def get_context():
    """The file data context, with the custom expectations registered first.

    Importing :mod:`topic_lineage.quality.custom_expectations` before the suites are read is
    what keeps GX from silently dropping the custom expectations. GX is imported without the
    modules it loads for what the gate never runs (:func:`topic_lineage.quality.gx_import.import_gx`).
    """
    from topic_lineage.quality.gx_import import import_gx

    import_gx()  # GX, and our expectations (registers the classes)
    import great_expectations as gx

    use_template_cache()

    quality = t.quality_dir()
    quality.mkdir(parents=True, exist_ok=True)
    return gx.get_context(
        mode="file",
        context_root_dir=str(context_dir()),
        runtime_environment={QUALITY_DIR_VARIABLE: str(quality)},
    )
