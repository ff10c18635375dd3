#!/usr/bin/env bash
# Creates .venv-iceberg/ in the repository root: the independent Iceberg readers that
# tests/test_iceberg_peers.py checks our published tables with (tests/iceberg_peers.py), in a venv
# of their own because they need other versions than ours (requirements.lock has pyspark 4.2 and
# duckdb 2.0; Iceberg's Spark runtime exists only up to Spark 4.1, the DuckDB iceberg extension
# wheel only for DuckDB 1.5.5):
# - the Python packages of requirements-iceberg.lock: pyspark 4.1, duckdb 1.5.5 and its iceberg,
#   avro and httpfs extensions (wheels: nothing is downloaded when DuckDB loads them);
# - .venv-iceberg/jars/spark/: Iceberg's Spark runtime, its AWS bundle (S3FileIO, for tables on
#   S3) and the SQLite and PostgreSQL JDBC drivers (scripts/iceberg_peers/spark.pom.xml), handed
#   to Spark with spark.jars;
# - .venv-iceberg/jars/rest/: the classpath of Iceberg's own REST catalog server
#   (scripts/iceberg_peers/rest-server.pom.xml; tests/servers/rest_catalog.py starts it).
# The jars come from Maven Central through Maven (mvn), at install time only.
# Idempotent: each part is skipped when what it was made from is unchanged since it last succeeded.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "install_iceberg_peers.sh: $*" >&2; exit 1; }

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2>/dev/null || {
  echo "the Iceberg peers' venv needs Python 3.11 (found: $("$PYTHON" --version 2>&1)). Set PYTHON=/path/to/python3.11." >&2
  exit 2
}
command -v java >/dev/null 2>&1 || fail "no 'java' on PATH: Spark and the REST catalog server need Java 17 (apt-get install openjdk-17-jre-headless)"
command -v mvn >/dev/null 2>&1 || fail "no 'mvn' on PATH: the jars are fetched from Maven Central with Maven (apt-get install maven)"

venv=.venv-iceberg
stamp=$venv/.installed
want=$(sha256sum requirements-iceberg.lock | cut -d' ' -f1)
if ! { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x $venv/bin/python ]; }; then
  rm -f "$stamp"
  [ -x $venv/bin/python ] || "$PYTHON" -m venv $venv || fail "could not create $venv with $PYTHON"
  $venv/bin/python -m pip install --quiet --disable-pip-version-check uv || fail "could not install uv into $venv"
  # sync, not install: a changed lock also removes what it no longer lists.
  $venv/bin/python -m uv pip sync --quiet --python $venv/bin/python requirements-iceberg.lock \
    || fail "could not install requirements-iceberg.lock into $venv"
  $venv/bin/python -c 'import pyspark, duckdb, duckdb_extension_iceberg, duckdb_extension_avro, duckdb_extension_httpfs' \
    || fail "$venv lacks one of pyspark, duckdb and its iceberg/avro/httpfs extensions after the install"
  echo "$want" > "$stamp"
  echo "installed the Iceberg peers' Python packages into $(pwd)/$venv"
fi

# jars NAME: resolves scripts/iceberg_peers/NAME.pom.xml's dependencies (and theirs) into
# $venv/jars/NAME/, unless they are there already from the same pom.
jars() {
  local name=$1 pom=scripts/iceberg_peers/$1.pom.xml dir=$venv/jars/$1
  local want_jars log
  want_jars=$(sha256sum "$pom" | cut -d' ' -f1)
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$want_jars" ]; then
    return 0
  fi
  rm -rf "$dir" "$dir.tmp"
  log=$venv/jars/$name-mvn.log
  mkdir -p $venv/jars
  mvn -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$(pwd)/$dir.tmp" \
    >"$log" 2>&1 || fail "could not fetch the $name jars of $pom from Maven Central: $(grep -m1 '\[ERROR\]' "$log" | cut -c1-300) (all of mvn's output: $log)"
  mv "$dir.tmp" "$dir"
  echo "$want_jars" > "$dir/.installed"
  echo "fetched the $name jars into $(pwd)/$dir ($(du -sh "$dir" | cut -f1))"
}
jars spark
jars rest-server
