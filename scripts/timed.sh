#!/usr/bin/env bash
# Runs one step of an install and says how long it took, on stderr, when it took a second or
# more (issue #52: a fresh clone's install is measured step by step against its 3 minutes; a step
# with nothing to do stays quiet):
#   bash scripts/timed.sh NAME COMMAND [ARGS...]
# Exits with the command's status.
set -uo pipefail
name=$1
shift
started=$(date +%s%N)
"$@"
status=$?
tenths=$((($(date +%s%N) - started) / 100000000))
if [ "$tenths" -ge 10 ]; then
  echo "[step] $name: $((tenths / 10)).$((tenths % 10)) s" >&2
fi
exit $status
