#!/usr/bin/env bash
# Creates .venv-dbt/ in the repository root with dbt-core and dbt-duckdb for the peer benchmark
# (tests/benchmarks/bench_dbt.py, run by tests/test_bench_dbt.py), pinned by requirements-dbt.lock.
# A venv of its own: dbt 1.10 needs pathspec<0.13, requirements.lock has pathspec 1.x.
# Only the package registry is used, at install time; dbt downloads nothing when it runs.
# Idempotent: does nothing when the lock is unchanged since the last successful install.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2>/dev/null || {
  echo "the dbt venv needs Python 3.11 (found: $("$PYTHON" --version 2>&1)). Set PYTHON=/path/to/python3.11." >&2
  exit 2
}

stamp=.venv-dbt/.installed
want=$(sha256sum requirements-dbt.lock | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv-dbt/bin/dbt ]; then
  exit 0
fi

rm -f "$stamp"
[ -x .venv-dbt/bin/python ] || "$PYTHON" -m venv .venv-dbt
.venv-dbt/bin/python -m pip install --quiet --disable-pip-version-check uv
# sync, not install: a changed lock also removes what it no longer lists.
.venv-dbt/bin/python -m uv pip sync --quiet --python .venv-dbt/bin/python requirements-dbt.lock
.venv-dbt/bin/python -c 'import dbt.cli.main, dbt.adapters.duckdb'  # fails here, not in a test
echo "$want" > "$stamp"
echo "installed dbt into $(pwd)/.venv-dbt"
