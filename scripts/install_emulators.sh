#!/usr/bin/env bash
# Installs the two storage emulators the tests run GCS and Azure against on loopback
# (tests/servers/gcs_emulator.py, tests/servers/azurite.py, tests/test_emulators.py), at install
# time only: starting them afterwards needs no network.
#   - fake-gcs-server (BSD-2-Clause), built with Go from its module through the Go module proxy:
#     go install github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION, the binary into
#     .venv/var/topic-lineage/fake-gcs-server-<version>/fake-gcs-server (GOBIN; GOTOOLCHAIN=local:
#     this Go, never a toolchain downloaded behind our back; CGO_ENABLED=0: a static binary).
#     Go keeps the sources it downloaded in its module cache and what it compiled in its build
#     cache (`go env GOMODCACHE GOCACHE`, shared with scripts/install_seaweedfs.sh), as any Go build.
#   - Azurite (MIT), from the npm registry: npm install --prefix
#     .venv/var/topic-lineage/azurite-<version> azurite@$AZURITE_VERSION. 3.35.0 is the newest
#     release that runs on Node.js 20 (the machine's; 3.36.0 asks for >= 21, 3.37.0 for >= 22).
# Needs `go` (on PATH, /usr/local/go/bin/go or $TOPIC_LINEAGE_GO) and `npm`/`node` on PATH.
# Idempotent: nothing when both are there. Prints the time it took. Runs after scripts/install.sh
# made .venv/.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .venv ] || { echo "install_emulators.sh: no .venv/: run bash scripts/install.sh first" >&2; exit 2; }

FAKE_GCS_VERSION=v1.56.1   # github.com/fsouza/fake-gcs-server, 2026-08-24 (go.mod: go 1.26)
AZURITE_VERSION=3.35.0     # npm azurite, 2025-09-23 (engines: node >= 10)

base=$(pwd)/.venv/var/topic-lineage
gcs_dir=$base/fake-gcs-server-$FAKE_GCS_VERSION
azurite_dir=$base/azurite-$AZURITE_VERSION
started=$(date +%s)
mkdir -p "$base"

if [ -x "$gcs_dir/fake-gcs-server" ]; then
  echo "fake-gcs-server $FAKE_GCS_VERSION: $gcs_dir/fake-gcs-server (already there)"
else
  go=${TOPIC_LINEAGE_GO:-}
  [ -n "$go" ] || go=$(command -v go || true)
  [ -n "$go" ] || { [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go; }
  [ -n "$go" ] || { echo "install_emulators.sh: no Go (go on PATH, /usr/local/go/bin/go or \$TOPIC_LINEAGE_GO)" >&2; exit 2; }
  echo "building fake-gcs-server $FAKE_GCS_VERSION with $("$go" version | cut -d' ' -f3) (a few minutes on 2 cores from an empty Go cache)"
  tmp=$(mktemp -d "$base/.fake-gcs-server.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # GOFLAGS replaced, not added to: a -mod or -modfile from the environment does not apply here.
  GOBIN=$tmp GOFLAGS=-trimpath GOTOOLCHAIN=local CGO_ENABLED=0 GO111MODULE=on \
    "$go" install -ldflags "-s -w" "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
  mkdir -p "$gcs_dir"
  mv "$tmp/fake-gcs-server" "$gcs_dir/fake-gcs-server"
  echo "fake-gcs-server $FAKE_GCS_VERSION: $gcs_dir/fake-gcs-server"
fi

if [ -x "$azurite_dir/node_modules/.bin/azurite-blob" ]; then
  echo "Azurite $AZURITE_VERSION: $azurite_dir (already there)"
else
  command -v npm >/dev/null 2>&1 || { echo "install_emulators.sh: no npm on PATH (Node.js)" >&2; exit 2; }
  echo "installing Azurite $AZURITE_VERSION from the npm registry"
  tmp_az=$azurite_dir.partial
  rm -rf "$tmp_az"
  # --prefer-offline: the package metadata npm already has in its cache is used as it is, not
  # asked again of the registry for each of Azurite's 374 packages (issue #52, 2026-12-01, warm
  # cache, 2 cores: 35.7 s -> 11.9 s, the same version of every package); what the cache lacks
  # is fetched as before.
  npm install --prefix "$tmp_az" --prefer-offline --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION"
  rm -rf "$azurite_dir"
  mv "$tmp_az" "$azurite_dir"
  echo "Azurite $AZURITE_VERSION: $azurite_dir"
fi

echo "emulators installed in $(( $(date +%s) - started )) s"
