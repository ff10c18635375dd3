#!/usr/bin/env bash
# Creates .venv/ in the repository root and installs topic-lineage (with its dev and local
# extras) into it, pinned by requirements.lock. Idempotent: does nothing when pyproject.toml and
# the lock are unchanged since the last successful install. Needs Python 3.11, Java 17 and Maven;
# no Go (scripts/test.sh builds the tests' S3 server, SeaweedFS, with scripts/install_seaweedfs.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2>/dev/null || {
  echo "topic-lineage needs Python 3.11 (found: $("$PYTHON" --version 2>&1)). Set PYTHON=/path/to/python3.11." >&2
  exit 2
}
command -v java >/dev/null 2>&1 || {
  echo "topic-lineage needs Java 17 for Spark and the local Kafka broker (no 'java' on PATH). On Debian: apt-get install openjdk-17-jre-headless" >&2
  exit 2
}

stamp=.venv/.installed
want=$(cat pyproject.toml requirements.lock | sha256sum | cut -d' ' -f1)
if ! { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv/bin/topic-lineage ]; }; then
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check uv
  # From uv's cache alone first (--offline), then from the index: pyspark and pyspark-client are
  # source distributions, and the index we install from answers uv's revalidation of the cached
  # 440 MB pyspark sdist as modified, so online uv downloads and builds both again on every
  # install (25 of 37 s on 2026-12-03). Offline it takes the wheels it built before (2 s); a cache
  # that lacks one of the locked versions fails before anything is installed, and the index is asked.
  bash scripts/timed.sh "packages (uv)" bash -c '
    install() { .venv/bin/python -m uv pip install --quiet --python .venv/bin/python -c requirements.lock "$@" -e ".[dev,local]"; }
    install --offline 2>/dev/null || install'
  echo "$want" > "$stamp"
  echo "installed topic-lineage into $(pwd)/.venv"
fi
# Byte-compile what is installed, once per install: where PYTHONDONTWRITEBYTECODE is set (as on
# our machines) Python never writes .pyc files itself, and every process (each CLI call, each
# Spark Python worker) would compile pandas, pyspark, Airflow, ... from source again. compileall
# writes them whatever that variable says; a file that does not compile (a Python 2 example in a
# package) is left as it is.
if [ "$(cat .venv/.compiled 2>/dev/null)" != "$want" ]; then
  bash scripts/timed.sh byte-compiling bash -c '.venv/bin/python -m compileall -q -j 0 \
    .venv/lib/python3.11/site-packages topic_lineage spark_jobs dags plugins >/dev/null 2>&1' || true
  echo "$want" > .venv/.compiled
  echo "byte-compiled the installed packages"
fi
# The archive of Spark's classes for this JDK and these jars (topic_lineage/local/jvm_archive.py):
# every Spark driver then starts in about half the time. About a minute, once per install; a
# failure only costs that speed, so it warns and goes on.
bash scripts/timed.sh "archive of Spark's classes" .venv/bin/python -m topic_lineage.local.jvm_archive \
  || echo "warning: no JVM archive of Spark's classes; Spark starts without it" >&2
# Apache Kafka's jars for the local broker of the demo and the tests (topic_lineage/local/
# kafka_dist.py): fetched once from Maven Central by Maven (mvn), kept in .venv/var/topic-lineage/
# kafka-<version>/, offline afterwards. Without them there is no demo: a failure stops here.
# Then (once, about half a minute) an archive of the classes its JVMs load, which halves a
# broker's start; without it they only start slower (a warning).
bash scripts/timed.sh "Kafka's jars" .venv/bin/python -m topic_lineage.local.kafka_dist
# Hadoop's S3A connector and the AWS SDK modules it uses (topic_lineage/local/s3a_jars.py,
# topic_lineage/local/spark_s3a.pom.xml): fetched once from Maven Central by Maven, about 13 MB,
# into .venv/var/topic-lineage/spark-s3a-<digest>/; Spark is given them (spark.jars) only when a
# location it will use is on S3 (topic_lineage.spark.object_store_conf).
bash scripts/timed.sh "S3A jars" .venv/bin/python -m topic_lineage.local.s3a_jars
