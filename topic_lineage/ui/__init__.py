"""The topic lineage page: a small FastAPI app over the published tables (served by Airflow).

``topic_lineage.ui.app.create_app`` builds the app; ``topic_lineage.ui.plugin`` (an Airflow
plugin, registered by entry point) mounts it in the Airflow api-server under ``/topic-lineage``
behind Airflow's own authentication.
"""

URL_PREFIX = "/topic-lineage"
"""Where the plugin mounts the app in the Airflow api-server."""


def data_docs_url(base_url: str, relative: str) -> str:
    """The http link of a gate report / Data Docs page (``relative`` to the quality directory)
    as served by the app, e.g. ``http://airflow:8080/topic-lineage/data-docs/index.html``."""
    return f"{base_url.rstrip('/')}{URL_PREFIX}/data-docs/{relative}"
