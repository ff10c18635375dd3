"""The *Topic lineage* page for an Airflow whose plugins folder is this directory.

The plugin is ``topic_lineage.ui.plugin.TopicLineagePlugin``, registered by the package's
``airflow.plugins`` entry point. Airflow loads the plugins folder first and reports a second
plugin of the same name as an import error, so this file exposes the class only when that entry
point is not installed (an install made before the entry point existed); otherwise it defines
nothing and the entry point registers the plugin, once.
"""

from __future__ import annotations

from topic_lineage.ui.plugin import registered_by_entry_point

if not registered_by_entry_point():
    from topic_lineage.ui.plugin import TopicLineagePlugin

    __all__ = ["TopicLineagePlugin"]
