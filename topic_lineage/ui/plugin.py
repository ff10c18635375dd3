"""Airflow 3 plugin: the topic lineage page inside the Airflow UI.

Registered through the ``airflow.plugins`` entry point of the ``topic-lineage`` distribution
(``pyproject.toml``), so an Airflow with this package installed shows the page with an empty
plugins folder. The repository's ``plugins/topic_lineage_plugin.py`` re-exports the class only
when that entry point is missing (see :func:`registered_by_entry_point`): Airflow registers a
plugin name once and reports a second one as an import error ("already registered, skipping").

Mounts ``topic_lineage.ui.app`` in the Airflow api-server under ``/topic-lineage`` and adds
"Topic lineage" to the Airflow navigation (shown inside the Airflow UI via ``url_route``).

Airflow gives plugin FastAPI apps no authentication of their own, so every route of the app
depends on Airflow's ``get_user`` (the JWT from the ``Authorization: Bearer`` header or the
UI's ``_token`` cookie, validated by the configured auth manager) plus the auth manager's
permission to see the Airflow website. No valid token: 401; invalid token or no permission: 403.
The gate report and Great Expectations Data Docs are served by the same app, script-free, under
``/topic-lineage/data-docs/`` (see ``topic_lineage.ui.data_docs``).
"""

from __future__ import annotations

from importlib import metadata
from typing import Annotated, Any, ClassVar

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import get_user
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, HTTPException, status

from topic_lineage.ui import URL_PREFIX
from topic_lineage.ui.app import create_app

ENTRY_POINT_GROUP = "airflow.plugins"
ENTRY_POINT_VALUE = "topic_lineage.ui.plugin:TopicLineagePlugin"


def registered_by_entry_point() -> bool:
    """Whether an installed distribution registers :class:`TopicLineagePlugin` through the
    ``airflow.plugins`` entry point (what Airflow's plugins manager loads after the folder)."""
    return any(
        ep.value.replace(" ", "") == ENTRY_POINT_VALUE
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
    )


def require_airflow_user(user: Annotated[BaseUser, Depends(get_user)]) -> BaseUser:
    """An authenticated Airflow user allowed to use the Airflow website, or 401/403."""
    if not get_auth_manager().is_authorized_view(access_view=AccessView.WEBSITE, user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "not allowed to view the Airflow website")
    return user


def airflow_login_url() -> str | None:
    """The configured auth manager's login page, returning to this page after sign-in."""
    try:
        return get_auth_manager().get_url_login(next_url=URL_PREFIX + "/")
    except RuntimeError:  # auth manager not initialised (the plugin is only being listed)
        return None


topic_lineage_app = create_app(require_airflow_user, login_url=airflow_login_url)


class TopicLineagePlugin(AirflowPlugin):
    name = "topic_lineage"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": topic_lineage_app, "url_prefix": URL_PREFIX, "name": "Topic lineage"},
    ]
    external_views: ClassVar[list[dict[str, Any]]] = [
        {
            "name": "Topic lineage",
            "href": URL_PREFIX + "/",
            "destination": "nav",
            "url_route": "topic-lineage",
            "nav_top_level": True,
        }
    ]
