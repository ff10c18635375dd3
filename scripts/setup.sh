#!/usr/bin/env bash
# One command from a fresh clone: create .venv/, install topic-lineage into it, and run the main
# job on the embedded defaults (local Kafka-protocol broker, local Spark, file-based GX, SQLite
# Airflow). Data goes to $TOPIC_LINEAGE_HOME (default: ./.topic-lineage for this demo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export TOPIC_LINEAGE_HOME=${TOPIC_LINEAGE_HOME:-$(pwd)/.topic-lineage}
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
exec .venv/bin/topic-lineage demo "$@"
