from topic_lineage.airflow import topic_lineage_dags

globals().update(topic_lineage_dags())
