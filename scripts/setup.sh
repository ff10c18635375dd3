#!/usr/bin/env bash
# One command from a fresh clone: create .venv/, install topic-lineage into it (scripts/install.sh)
# and run the demo (topic-lineage demo) on the embedded defaults: a local Apache Kafka broker
# (KRaft), local Spark, the Great Expectations gate, Iceberg tables in the embedded SQL catalog,
# and a local Airflow on its own PostgreSQL. Needs Python 3.11, Java 17 and Maven; no Go, no
# Docker (the tests' S3 server is scripts/test.sh's). Arguments go to `topic-lineage demo`
# (e.g. --serve). Data goes to $TOPIC_LINEAGE_HOME (default: ./.topic-lineage for this demo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export TOPIC_LINEAGE_HOME=${TOPIC_LINEAGE_HOME:-$(pwd)/.topic-lineage}
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
exec .venv/bin/topic-lineage demo "$@"
