#!/usr/bin/env bash
# Runs the whole test suite (installs first when needed). Extra arguments go to pytest.
#   bash scripts/test.sh          the whole suite (CI); property tests with the `ci` Hypothesis profile
#   bash scripts/test.sh --fast   the development tier: no `slow` tests, property tests with the
#                                 `fast` profile (fewer examples)
# Test files are spread over $TOPIC_LINEAGE_TEST_WORKERS worker processes (pytest-xdist, a file
# stays on one worker; TOPIC_LINEAGE_TEST_WORKERS=0 runs everything in this process). Default: 2
# for the whole suite, which keeps two cores busy (a third worker: 3% faster, load average 8);
# 3 for --fast, whose short tests leave a core idle a sixth of the time with two (issue #52,
# 2026-11-29, 2 cores: 351 s with two workers, 84% busy; 308 s with three, 97% busy). The whole
# suite adds a waiting lane, one worker more for the few files that mostly wait
# (TOPIC_LINEAGE_WAITING_LANE=1, tests/waiting_lane.py; 0 turns it off, --fast's default).
# Except in --fast mode it also installs .venv-dbt/ (scripts/install_dbt.sh) for the dbt peer
# benchmark test (tests/test_bench_dbt.py), which fails without it; TOPIC_LINEAGE_NO_DBT=1 skips
# both the install and that test. Likewise it installs .venv-iceberg/ (scripts/install_iceberg_peers.sh:
# Spark 4.1 with Iceberg's runtime, DuckDB 1.5.5 with its iceberg extension, Iceberg's REST catalog
# server) for tests/test_iceberg_peers.py, which fails without it; TOPIC_LINEAGE_NO_ICEBERG_PEERS=1
# skips both. It also builds SeaweedFS's weed binary with Go (scripts/install_seaweedfs.sh: the S3
# server of the tests marked `s3`, tests/servers/s3_server.py; missing, they fail) unless
# TOPIC_LINEAGE_NO_SEAWEEDFS=1, which --fast sets (they then run only when it is already built).
# Likewise the GCS and Azure emulators (scripts/install_emulators.sh: fake-gcs-server built with Go,
# Azurite from npm; the tests marked `emulators`) unless TOPIC_LINEAGE_NO_EMULATORS=1, which --fast
# sets. scripts/install.sh (and so scripts/setup.sh) builds none: the demo needs no Go.
set -euo pipefail
fast=()
if [ "${1:-}" = "--fast" ]; then
  shift
  export TOPIC_LINEAGE_HYPOTHESIS=fast
  fast=(-m "not slow")
  # --fast installs no .venv-iceberg/ (its readers' tests are all `slow`)
  export TOPIC_LINEAGE_NO_ICEBERG_PEERS=${TOPIC_LINEAGE_NO_ICEBERG_PEERS:-1}
  # nor does it build SeaweedFS: the S3 tests run when its binary is already built, else skip
  export TOPIC_LINEAGE_NO_SEAWEEDFS=${TOPIC_LINEAGE_NO_SEAWEEDFS:-1}
  export TOPIC_LINEAGE_NO_EMULATORS=${TOPIC_LINEAGE_NO_EMULATORS:-1}
  export TOPIC_LINEAGE_TEST_WORKERS=${TOPIC_LINEAGE_TEST_WORKERS:-3}
  export TOPIC_LINEAGE_WAITING_LANE=${TOPIC_LINEAGE_WAITING_LANE:-0}
fi
cd "$(dirname "$0")/.."
installs_started=$(date +%s%N)
# The installs run side by side where they share nothing (issue #52: a fresh clone's installs
# within 3 minutes; one after another, most of them left a core idle, waiting on a JVM, Maven, a
# linker or the package index): dbt's venv from the start, SeaweedFS and the emulators (Go, npm)
# beside Kafka 3.9's jars and the Iceberg peers once .venv/ is there. The steps that run Maven
# stay one after another (Maven 3.8 does not lock its local repository between processes). A
# step that fails ends the run (exit 1) once the others started beside it are done.
beside=()
names=()
run_beside() {  # NAME COMMAND...: run in the background; await_beside waits for it
  names+=("$1")
  shift
  "$@" &
  beside+=($!)
}
await_beside() {
  local i failed=0
  for i in "${!beside[@]}"; do
    if ! wait "${beside[$i]}"; then
      echo "install step failed: ${names[$i]}" >&2
      failed=1
    fi
  done
  beside=()
  names=()
  [ "$failed" = 0 ] || exit 1
}
if [ ${#fast[@]} = 0 ] && [ "${TOPIC_LINEAGE_NO_DBT:-}" != 1 ]; then
  run_beside dbt bash scripts/timed.sh dbt bash scripts/install_dbt.sh
fi
bash scripts/timed.sh install bash scripts/install.sh || { await_beside; exit 1; }
# SeaweedFS's weed, once (Go >= the version its go.mod names; nothing when it is built)
if [ "${TOPIC_LINEAGE_NO_SEAWEEDFS:-}" != 1 ]; then
  run_beside SeaweedFS bash scripts/timed.sh SeaweedFS bash scripts/install_seaweedfs.sh
fi
# fake-gcs-server and Azurite, once (nothing when they are there)
if [ "${TOPIC_LINEAGE_NO_EMULATORS:-}" != 1 ]; then
  run_beside emulators bash scripts/timed.sh emulators bash scripts/install_emulators.sh
fi
maven_steps() {  # each step's failure returned (set -e does not hold in a function under ||)
  # The live capture and consumer-group tests also run against Kafka 3.9 (tests/conftest.py).
  bash scripts/timed.sh "Kafka 3.9's jars" .venv/bin/python -m topic_lineage.local.kafka_dist --with-compat \
    || return
  if [ ${#fast[@]} = 0 ] && [ "${TOPIC_LINEAGE_NO_ICEBERG_PEERS:-}" != 1 ]; then
    bash scripts/timed.sh "Iceberg peers" bash scripts/install_iceberg_peers.sh || return
  fi
}
maven_steps || { await_beside; exit 1; }
await_beside
# The Data Docs and UI browser tests drive Debian's headless Chromium.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing Debian's chromium for the browser tests"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "could not install chromium: browser tests will fail" >&2
fi
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
# Python may cache compiled modules during the tests (PYTHONDONTWRITEBYTECODE, set on our machines,
# forbids it): pytest then keeps its assertion-rewritten test modules in tests/__pycache__/
# (ignored by git), and the next run's workers collect from them instead of rewriting all ~90
# files each (issue #52, a quiet 2-core machine: 5.3 s -> 2.3 s to start two workers and collect
# the fast tier). The installed packages are compiled at install (scripts/install.sh).
unset PYTHONDONTWRITEBYTECODE
workers=${TOPIC_LINEAGE_TEST_WORKERS:-2}
parallel=()
if [ "$workers" != 0 ]; then
  # The waiting lane (tests/waiting_lane.py): one worker more, for the few files that mostly
  # wait (server starts, retries, timeouts), so that their waits no longer leave a core idle.
  # On for the whole suite; --fast runs three workers of one kind.
  export TOPIC_LINEAGE_WAITING_LANE=${TOPIC_LINEAGE_WAITING_LANE:-1}
  [ "$TOPIC_LINEAGE_WAITING_LANE" = 1 ] && workers=$((workers + 1))
  # in collection order: tests/conftest.py puts the longest files first (xdist would otherwise
  # start the files with the most tests first)
  parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi
tenths=$((($(date +%s%N) - installs_started) / 100000000))
echo "[step] every install before the tests: $((tenths / 10)).$((tenths % 10)) s" >&2
# --durations: the 30 slowest tests close the report (what the suite's time goes to, issue #24)
exec .venv/bin/python -m pytest "${parallel[@]}" "${fast[@]}" --durations=30 "$@"
