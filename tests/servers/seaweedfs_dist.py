"""SeaweedFS's ``weed`` binary, the S3-compatible server the tests run against, built once from
source with the machine's Go and kept with the installation, so that starting a server afterwards
needs no network.

``scripts/install_seaweedfs.sh`` (run by ``scripts/test.sh``; ``scripts/install.sh`` and
``scripts/setup.sh`` build nothing: the demo needs no Go) runs ``python -m
tests.servers.seaweedfs_dist``. SeaweedFS is Apache-2.0 and publishes no Go release
binaries we could pin by digest, so it is built from its module at :data:`VERSION` (a commit of
github.com/seaweedfs/seaweedfs, fetched through the Go module proxy). ``go install module@version``
refuses it (its go.mod has replace directives), so the build does what ``go install`` would in a
checkout: ``go mod download -json`` the module, copy its directory out of the (read-only) module
cache, and ``go build ./weed`` in the copy, with ``-trimpath -ldflags "-s -w"`` (no paths of this
machine and no symbol tables: a smaller binary), ``CGO_ENABLED=0`` (no C compiler needed; a static
binary) and ``GOTOOLCHAIN=local`` (this Go, never a toolchain downloaded behind our back).

The binary goes to ``<dir>/seaweedfs-<commit>/weed`` where ``<dir>`` is
``$TOPIC_LINEAGE_SEAWEEDFS_DIR`` or ``var/topic-lineage`` in the Python installation (the
virtualenv), beside Kafka's jars (:mod:`topic_lineage.local.kafka_dist`). It is built under a
temporary name and renamed, so a binary there is complete; building when it is there does nothing.
Go keeps what it downloaded in its module cache (``go env GOMODCACHE``, ``~/go/pkg/mod``) and what
it compiled in its build cache (``go env GOCACHE``): a second build on the same machine is quick.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from topic_lineage.errors import TopicLineageError

MODULE = "github.com/seaweedfs/seaweedfs"
VERSION = "v0.0.0-20261109003541-7506e5f91cd6"  # SeaweedFS 4.53's tree on 2026-11-09
# The release that commit's tree carries (weed/util/version/constants.go; `weed version` prints
# it): docker-compose.yml runs that release's image, chrislusf/seaweedfs:<RELEASE>
# (tests/test_compose.py, tests/test_s3_server.py).
RELEASE = "4.53"
GO_MINIMUM = "1.26.6"  # the `go` line of that commit's go.mod
DIR_ENV = "TOPIC_LINEAGE_SEAWEEDFS_DIR"
GO_ENV = "TOPIC_LINEAGE_GO"  # a Go to build with, when it is not `go` on PATH
SKIP_ENV = "TOPIC_LINEAGE_NO_SEAWEEDFS"  # scripts/test.sh builds nothing; S3 tests skip
GO_FALLBACK = Path("/usr/local/go/bin/go")  # where Go's own tarball installs
PROG = "python -m tests.servers.seaweedfs_dist"


class SeaweedfsDistError(TopicLineageError, RuntimeError):
    """The ``weed`` binary is not there and could not be built."""


def commit(version: str = VERSION) -> str:
    """The commit a Go pseudo-version names (its last part)."""
    return version.rsplit("-", 1)[-1]


def base_dir() -> Path:
    setting = os.environ.get(DIR_ENV, "").strip()
    return Path(setting).expanduser().resolve() if setting else Path(sys.prefix) / "var" / "topic-lineage"


def weed_path(version: str = VERSION) -> Path:
    return base_dir() / f"seaweedfs-{commit(version)}" / "weed"


def is_built(version: str = VERSION) -> bool:
    path = weed_path(version)
    return path.is_file() and os.access(path, os.X_OK)


def weed_executable(version: str = VERSION) -> Path:
    """The built binary; one line saying how to build it when it is not there."""
    if not is_built(version):
        raise SeaweedfsDistError(
            f"SeaweedFS's weed binary is not built ({weed_path(version)} is missing): run "
            f"bash scripts/install_seaweedfs.sh (scripts/test.sh runs it; it needs Go "
            f">= {GO_MINIMUM} and the Go module proxy once)")
    return weed_path(version)


def go_executable() -> str:
    """``$TOPIC_LINEAGE_GO``, the ``go`` on PATH, or Go's default place; one line when none."""
    setting = os.environ.get(GO_ENV, "").strip()
    candidates = [setting] if setting else [shutil.which("go"), str(GO_FALLBACK)]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise SeaweedfsDistError(
        f"building SeaweedFS (the S3 server of the tests) needs Go >= {GO_MINIMUM}: no 'go' on "
        f"PATH, nor {GO_FALLBACK}{f' nor ${GO_ENV}={setting}' if setting else ''}; install it "
        "from https://go.dev/dl/ or set " + GO_ENV)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"})
    return env


def _run_go(go: str, args: list[str], *, cwd: Path | None, what: str) -> str:
    result = subprocess.run([go, *args], cwd=cwd, env=_go_env(), capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        tail = " ".join((result.stderr or result.stdout).split())[-600:]
        raise SeaweedfsDistError(
            f"{what} failed (go {' '.join(args[:2])} exited {result.returncode}: "
            f"{tail or 'no output'}); it needs Go >= {GO_MINIMUM} (GOTOOLCHAIN=local) and access "
            "to the Go module proxy (GOPROXY, https://proxy.golang.org by default)")
    return result.stdout


def module_dir(go: str, version: str = VERSION) -> Path:
    """The module's source in Go's module cache (downloaded first when it is not there)."""
    out = _run_go(go, ["mod", "download", "-json", f"{MODULE}@{version}"], cwd=None,
                  what=f"downloading {MODULE}@{version}")
    info = json.loads(out)
    if info.get("Error") or not info.get("Dir"):
        raise SeaweedfsDistError(f"downloading {MODULE}@{version} failed: {info.get('Error')}")
    return Path(info["Dir"])


def build(version: str = VERSION, *, out=None) -> Path:
    """Build ``weed`` at ``version`` into :func:`weed_path` (nothing when it is there)."""
    target = weed_path(version)
    if is_built(version):
        return target
    go = go_executable()
    began = time.monotonic()
    if out:
        out(f"building SeaweedFS's weed ({MODULE}@{version}) with {go} into {target}")
    source = module_dir(go, version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tl-seaweedfs-build-") as tmp:
        tree = Path(tmp) / "seaweedfs"
        shutil.copytree(source, tree)
        for path in [tree, *tree.rglob("*")]:  # the module cache's files are read-only
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o200)
        built = target.with_name(f".weed.{os.getpid()}.tmp")
        stamp = f"-X {MODULE}/weed/util/version.COMMIT={commit(version)[:8]}"
        try:
            _run_go(go, ["build", "-trimpath", "-ldflags", f"-s -w {stamp}", "-o", str(built),
                         "./weed"], cwd=tree, what=f"building {MODULE}/weed@{version}")
            check = subprocess.run([str(built), "version"], capture_output=True, text=True,
                                   check=False, stdin=subprocess.DEVNULL, timeout=60)
            if check.returncode != 0:
                raise SeaweedfsDistError(f"the weed binary just built does not run: "
                                         f"{' '.join((check.stderr or check.stdout).split())[-300:]}")
            built.rename(target)
        finally:
            built.unlink(missing_ok=True)
    if out:
        size = target.stat().st_size / 2**20
        out(f"built SeaweedFS's weed in {time.monotonic() - began:.0f} s ({size:.0f} MiB): {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Build SeaweedFS's weed binary for the tests' S3 server (once).")
    parser.add_argument("--path", action="store_true", help="print where the binary goes and exit")
    args = parser.parse_args(argv)
    if args.path:
        print(weed_path())
        return 0
    try:
        if is_built():
            return 0
        build(out=print)
    except SeaweedfsDistError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
