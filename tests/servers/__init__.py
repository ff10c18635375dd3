"""Servers only the tests and the benchmarks start: not part of the product (the wheel holds
``topic_lineage`` and ``spark_jobs`` only; ``tests/test_install.py`` checks it).

- :mod:`tests.servers.s3_server`: an S3-compatible server on loopback, SeaweedFS, whose ``weed``
  binary :mod:`tests.servers.seaweedfs_dist` builds from source with Go
  (``scripts/install_seaweedfs.sh``, run by ``scripts/test.sh``);
- :mod:`tests.servers.s3_faults`: a fault proxy in front of it (throttling, slow answers,
  request counts);
- :mod:`tests.servers.rest_catalog`: Iceberg's own REST catalog server over a local warehouse
  (its jars come with ``.venv-iceberg/``, ``scripts/install_iceberg_peers.sh``);
- :mod:`tests.servers.standalone`: a Spark standalone master and workers on the loopback address,
  so tasks run in executors other than the driver.

What ``topic-lineage demo`` and ``topic-lineage airflow start`` run (the Kafka broker, Airflow's
PostgreSQL, the Spark Connect server) stays in :mod:`topic_lineage.local`; these modules use it.
Import them as ``tests.servers.<module>`` from the repository root (pytest, ``python -m``).
"""
