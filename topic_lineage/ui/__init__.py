"""The topic lineage page: a small FastAPI app over the published tables (served by Airflow).

``topic_lineage.ui.app.create_app`` builds the app; ``plugins/topic_lineage_plugin.py`` mounts
it in the Airflow api-server under ``/topic-lineage`` behind Airflow's own authentication.
"""
