"""Operators of the topic-lineage DAGs (imported by DAG files: Airflow and provider code only)."""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from topic_lineage import airflow_tasks as at


class BuildVersionOperator(SparkSubmitOperator):
    """``spark-submit spark_jobs/build.py --version-id V``: writes version V, never publishes.

    Goes through the Spark provider (connection ``spark_default``: its host is the master,
    ``local[*]`` when set up by ``topic-lineage airflow setup``). Safe to retry: an unfinished
    version left by a killed attempt is removed first, a finished one is not built twice.
    """

    def __init__(self, *, version: Any, **kwargs: Any) -> None:
        kwargs.setdefault("conn_id", at.SPARK_CONN_ID)
        kwargs.setdefault("name", "topic-lineage-build")
        super().__init__(
            application=at.build_application(), application_args=["--version-id", version], **kwargs
        )

    def execute(self, context: Any) -> None:
        version = str(self.application_args[1])
        if not at.prepare_build(version):
            return None
        # No-op run (nothing new since the published version): skip, and with it validate and
        # publish; the run succeeds. Decided without Spark (topic_lineage/noop.py).
        from airflow.sdk.exceptions import AirflowSkipException

        from spark_jobs.build import hold_policy
        from topic_lineage import noop

        policy = hold_policy()
        decision = noop.decide(policy.ratio, policy.min_count)
        if decision.noop:
            raise AirflowSkipException(str(decision))
        return super().execute(context)
