"""Stopping a session (``topic_lineage.spark.stop``): the JVM's context stops before the call
returns, while PySpark's accumulator server, which used to hold the caller for up to a second
(its handler polls the JVM's connection once a second), shuts down on a thread of its own; the
next session in the same process runs Python tasks with accumulators as before."""

from __future__ import annotations

import socket
import threading

import pytest

from topic_lineage.spark import get_spark, stop

pytestmark = pytest.mark.spark


def _counted(spark, n: int) -> int:
    """An accumulator added to by Python tasks (so the JVM connects to the accumulator server)."""
    total = spark.sparkContext.accumulator(0)
    spark.sparkContext.parallelize(range(n), 2).foreach(lambda _: total.add(1))
    return total.value


def test_stop_leaves_the_accumulator_servers_wait_to_a_thread_and_the_next_session_works():
    from pyspark import SparkContext

    spark = get_spark("topic-lineage-stop-test", master="local[2]", quick_jit=True)
    assert _counted(spark, 7) == 7
    context = spark.sparkContext
    server = context._accumulatorServer
    host, port = server.server_address
    callers = []
    shut_down = server.shutdown

    def recorded_shutdown():
        callers.append(threading.current_thread())
        shut_down()

    server.shutdown = recorded_shutdown
    stop(spark)

    assert context._jsc is None and SparkContext._active_spark_context is None
    assert callers and callers[0] is not threading.main_thread(), callers
    callers[0].join(timeout=10)
    assert not callers[0].is_alive()
    with pytest.raises(OSError), socket.create_connection((host, port), timeout=2):
        pass  # the server is closed

    again = get_spark("topic-lineage-stop-test-again", master="local[2]", quick_jit=True)
    try:
        assert _counted(again, 5) == 5
    finally:
        stop(again)


def test_a_session_without_an_accumulator_server_is_stopped_as_it_is():
    """A Spark Connect session has no SparkContext: ``stop`` is its own ``stop``."""

    class ConnectLike:
        stopped = 0

        def stop(self):
            self.stopped += 1

    session = ConnectLike()
    stop(session)
    assert session.stopped == 1
