#!/usr/bin/env bash
# Runs the whole test suite (installs first when needed). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
exec .venv/bin/python -m pytest "$@"
