"""Great Expectations' import, without what the gate never runs (issue #24).

GX imports, at its own import, modules for features the gate never uses: SQL data sources,
Spark ML, the distribution expectations' statistics and charts. On 2 cores they were more than
half of its import. Every process of ours imports GX with :func:`import_gx`: through
:func:`topic_lineage.quality.context.get_context` (the gate, the CLI's ``validate``, Airflow's
tasks), a build's background import (:func:`topic_lineage.pipeline.import_in_background`)
and the warm process (:mod:`topic_lineage.local.warm_server`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
import types

HIDING = threading.Lock()
"""Held while :func:`import_gx` hides :data:`GX_UNUSED_MODULES`: code of ours that imports one
of them in another thread (the build staging its Iceberg tables in a SQL catalog, while GX is
imported in the background) takes it first, and so waits until they are importable again."""

GX_UNUSED_MODULES = ("sqlalchemy", "pyspark.ml")
"""Optional dependencies Great Expectations imports whenever they are installed, for what the
gate never uses: SQL datasources (``sqlalchemy``, installed for Airflow) and Spark ML's
``Bucketizer`` (column histograms on Spark; ``pyspark`` ships ``pyspark.ml``). GX runs without
them (its ``great_expectations.compatibility`` modules import each in a ``try``)."""

GX_DEFERRED_MODULES = ("scipy.stats", "altair")
"""Dependencies Great Expectations imports unconditionally, at module level, for expectations
the gate never runs: ``scipy.stats`` (the Kolmogorov-Smirnov and KL-divergence expectations) and
``altair`` (the KL-divergence expectation's charts). GX only uses them inside those
expectations' functions, so they are put in place as :class:`DeferredModule`: imported on first
use, by whatever uses them first, and never otherwise."""


class DeferredModule(types.ModuleType):
    """Stands in :data:`sys.modules` for a module that is imported on its first use.

    ``import name`` and ``from parent import child`` return this object without running the
    module. The first attribute it does not hold itself (``stats.kstest``, ``alt.Chart``)
    imports the real module, which then replaces it in :data:`sys.modules` and in its parent
    package; this object forwards every later attribute to it. It holds ``__spec__`` (the
    import system checks it), ``__file__`` and ``__loader__``, but no ``__path__``: importing a
    submodule imports the real package first. (The standard library's
    :class:`importlib.util.LazyLoader` runs the module at the import system's first look at
    it, which every ``import`` statement takes.)"""

    def __init__(self, spec) -> None:
        super().__init__(spec.name)
        self.__spec__, self.__loader__ = spec, spec.loader
        self.__file__, self.__package__ = spec.origin, spec.parent
        self._deferred_lock = threading.RLock()  # the real import may use this name again

    def __getattr__(self, attr: str):
        with self._deferred_lock:
            name = self.__spec__.name
            if sys.modules.get(name) is self:
                del sys.modules[name]
            real = importlib.import_module(name)  # binds itself to its parent package
        return getattr(real, attr)


def _defer(name: str) -> bool:
    """Put a :class:`DeferredModule` for ``name`` in :data:`sys.modules`, bound to its parent
    package as ``import`` binds a module. False when it cannot be found."""
    try:
        spec = importlib.util.find_spec(name)  # imports the parent package (scipy's is light)
    except ModuleNotFoundError:  # no parent package
        return False
    if spec is None or spec.loader is None:
        return False
    sys.modules[name] = module = DeferredModule(spec)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return True


def import_gx() -> dict[str, list[str]]:
    """Import Great Expectations and our expectations without executing the modules it loads for
    expectations the gate never runs: :data:`GX_UNUSED_MODULES` hidden, :data:`GX_DEFERRED_MODULES`
    deferred. On 2 cores GX's import took 5.8 s; 1.1-1.3 s of it were the hidden modules and
    about 1.5 s the deferred ones (issue #24). Our expectations are imported too, always (GX
    drops the expectations of a suite whose classes are not registered). Returns
    ``{"hidden": [...], "deferred": [...]}``: both empty when GX is loaded already; a module
    imported before is left as it is.

    Hidden only while GX is imported (``sys.modules[name] = None``, the import system's "not
    importable" mark), then importable again: GX keeps its own "not installed" placeholders,
    and whatever else the process runs later (an Airflow import in the same process) imports
    them as usual. Meanwhile another thread importing one of them gets an ``ImportError``
    naming it; the build's thread imports neither. A deferred module stays lazy: it is
    executed on first use, by GX or anything else in the process."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # nothing of ours may reach the internet
    loaded = "great_expectations" in sys.modules
    hidden = [] if loaded else [name for name in GX_UNUSED_MODULES if name not in sys.modules]
    deferred = [] if loaded else [name for name in GX_DEFERRED_MODULES
                                  if name not in sys.modules and _defer(name)]
    with HIDING:
        for name in hidden:
            sys.modules[name] = None
        try:
            import great_expectations  # noqa: F401

            from topic_lineage.quality import custom_expectations  # noqa: F401 (registers the classes)
        finally:
            for name in hidden:
                if name in sys.modules and sys.modules[name] is None:
                    del sys.modules[name]
    return {"hidden": hidden, "deferred": deferred}
