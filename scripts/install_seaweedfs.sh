#!/usr/bin/env bash
# Builds SeaweedFS's `weed` binary, the S3-compatible server (Apache-2.0) the tests run against on
# loopback (tests/servers/s3_server.py), into .venv/var/topic-lineage/seaweedfs-<commit>/weed
# (tests/servers/seaweedfs_dist.py: the pinned version, where it goes, how it is built).
# It needs Go (>= the version SeaweedFS's go.mod names: `go` on PATH, /usr/local/go/bin/go or
# $TOPIC_LINEAGE_GO) and the Go module proxy, once: the source and its dependencies go to Go's
# module cache (~/go/pkg/mod), compiled packages to its build cache. Prints the build's time.
# Idempotent: nothing when the binary is there. Runs after scripts/install.sh made .venv/.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "install_seaweedfs.sh: no .venv/: run bash scripts/install.sh first" >&2; exit 2; }
exec .venv/bin/python -m tests.servers.seaweedfs_dist "$@"
