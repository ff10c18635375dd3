"""Operators of the topic-lineage DAGs (imported by DAG files: Airflow and provider code only)."""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.utils.skipmixin import SkipMixin
from airflow.sdk import BaseOperator

from topic_lineage.airflow.build import (
    build_application,
    build_on_connect_server,
    plan_follow,
    plan_version,
    prepare_build,
)
from topic_lineage.airflow.config import SPARK_CONN_ID, DagOptions, task_environment


class PlanOperator(BaseOperator, SkipMixin):
    """Names the version this run builds (its return value, the XCom the other tasks read) and
    decides, without Spark, whether the run is a no-op (:func:`topic_lineage.airflow.build.
    noop_run`). A no-op run skips its downstream tasks from here, as a branch does, so the
    scheduler starts no task process for ``build``, ``validate``, ``publish`` (nor ``health``
    unless the published version's gate warned); ``lineage`` likewise when no OpenLineage
    transport is configured (:func:`topic_lineage.airflow.build.plan_follow`)."""

    def __init__(self, *, options: DagOptions | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topic_lineage_options = options

    def execute(self, context: Any) -> str:
        with task_environment(self.topic_lineage_options):
            return self._execute(context)

    def _execute(self, context: Any) -> str:
        version = plan_version(context["run_id"], context["dag_run"].run_type)
        follow = plan_follow(version)
        if follow is None:
            return version
        ti = context["ti"]
        ti.xcom_push(key="return_value", value=version)  # a skip ends execute before its return
        self.skip_all_except(ti, follow)
        return version


class BuildVersionOperator(SparkSubmitOperator):
    """``spark-submit spark_jobs/build.py --version-id V``: writes version V, never publishes.
    When the deployment's Spark Connect server runs, the same build runs on it from the task
    process instead (:func:`topic_lineage.airflow.build.build_on_connect_server`).

    Goes through the Spark provider (connection ``spark_default``: its host is the master,
    ``local[*]`` when set up by ``topic-lineage airflow setup``). Safe to retry: an unfinished
    version left by a killed attempt is removed first, a finished one is not built twice.
    """

    def __init__(
        self, *, version: Any, options: DagOptions | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("conn_id", options.spark_conn_id if options else SPARK_CONN_ID)
        kwargs.setdefault("name", "topic-lineage-build")
        super().__init__(
            application=build_application(), application_args=["--version-id", version], **kwargs
        )
        self.topic_lineage_options = options

    def _get_hook(self):
        """The provider's hook; with the option ``spark_master``, submitting to that master
        instead of the connection's host.

        A driver that runs in this process's machine (not ``deploy-mode cluster``) gets the JVM
        options the CLI's driver gets, unless ``conf`` sets ``spark.driver.extraJavaOptions``.

        The Spark provider (6.3.4) has no public parameter for the master: its hook resolves it
        from the connection in ``__init__`` and derives the fields below from it, so they are
        set again here. The standalone REST endpoint (cluster deploy mode) was derived from the
        connection's host: without it, the driver's status is asked of ``--master``, this one.
        """
        hook = super()._get_hook()
        master = self.topic_lineage_options and self.topic_lineage_options.spark_master
        if master:
            hook._connection["master"] = master
            hook._connection["rest_endpoint"] = None
            hook._is_yarn = "yarn" in master
            hook._is_yarn_cluster_mode = hook._is_yarn and hook._connection["deploy_mode"] == "cluster"
            hook._is_kubernetes = "k8s" in master
        # With the home on S3 the driver's JVM needs Hadoop's S3A jars and settings from its
        # start, which spark-submit makes before build.py runs (a session cannot add jars
        # later): given here as --conf. Never a credential: those stay in the environment.
        from topic_lineage.spark import merged_conf, object_store_conf, session_locations

        object_store = object_store_conf(session_locations())
        if object_store:
            hook._conf = merged_conf(object_store, hook._conf)  # what the operator's conf sets wins
        if hook._connection["deploy_mode"] != "cluster" and "spark.driver.extraJavaOptions" not in hook._conf:
            # The driver runs here: it starts as the CLI's does (topic_lineage.spark), with this
            # installation's archive of Spark's classes and, for a small store, the quick JIT.
            # A --conf is the only way in, its JVM is started before build.py runs.
            from topic_lineage.spark import driver_java_options, quick_jit_for_store

            hook._conf = {**hook._conf, "spark.driver.extraJavaOptions":
                          driver_java_options(quick_jit=quick_jit_for_store())}
        return hook

    def execute(self, context: Any) -> None:
        # TOPIC_LINEAGE_HOME / the Spark Connect URL of the options, the object store's
        # connection and working copy, for this process and the spark-submit it starts: it
        # inherits them (no env_vars: for YARN and Kubernetes the provider puts those on the
        # spark-submit command line, which Airflow's event log and `ps` show).
        with task_environment(self.topic_lineage_options):
            return self._execute(context)

    def _execute(self, context: Any) -> None:
        version = str(self.application_args[1])
        if not prepare_build(version):
            return None
        # Checked again here (``plan`` decided it before this run waited for the build pool):
        # a no-op skips, and with it validate and publish; the run succeeds. No Spark is needed
        # to decide (topic_lineage/noop.py).
        from airflow.sdk.exceptions import AirflowSkipException

        from topic_lineage import noop

        decision = noop.decide(*noop.hold_thresholds())
        if decision.noop:
            raise AirflowSkipException(str(decision))
        # On the deployment's Spark Connect server when it runs (no JVM start, warm planner);
        # else spark-submit through the provider, as before.
        if build_on_connect_server(version) is not None:
            return None
        return super().execute(context)
