"""A class-data-sharing archive of Spark's classes, so a driver JVM starts in half the time.

A Spark driver loads about 20,000 classes from some 250 jars before its first job, and a new
JVM parses and verifies each one: most of a bare session's 9 s on 2 cores (issue #24). HotSpot
can keep the classes one run loaded, parsed and verified, in a file that later JVMs map
(dynamic CDS, JDK 13+): ``-XX:ArchiveClassesAtExit`` writes it, ``-XX:SharedArchiveFile``
reads it. Measured here (2026-11-26, 2 cores, a bare session's start + one small job): 9.2-10.8 s
without, 5.2-5.8 s with.

The archive is only valid for the JDK and the jars it was made with, so its file name carries a
fingerprint of both (:func:`fingerprint`): after an upgrade of either, no archive matches and
Spark starts as before until ``topic-lineage jvm-archive`` makes a new one
(``scripts/install.sh`` runs it). A JVM maps a broken archive file and crashes (SIGBUS on a
truncated one), so an archive is only ever used under its final name, which it gets by an
atomic rename after a JVM has started with it under ``-Xshare:on`` (which refuses to start on
an archive it cannot map).

``$TOPIC_LINEAGE_JVM_ARCHIVE``: ``off`` never uses one; otherwise the directory of the archives
(default: ``var/topic-lineage`` in the Python installation, the virtualenv, whose jars it is of).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from topic_lineage.errors import TopicLineageError
from topic_lineage.fsutil import installation_dir

ARCHIVE_ENV = "TOPIC_LINEAGE_JVM_ARCHIVE"
MODULE = "topic_lineage.local.jvm_archive"  # run as a script too (install.sh): not __name__
STEPS_MODULE = "topic_lineage.local.jvm_archive_steps"  # what runs in the JVMs that make it
OFF = "off"


class JvmArchiveError(TopicLineageError, RuntimeError):
    """Making the archive failed; the message has the end of the output of the JVM that tried."""


def archive_dir() -> Path | None:
    """Where this installation's archives live; ``None`` when ``$TOPIC_LINEAGE_JVM_ARCHIVE`` is off."""
    if os.environ.get(ARCHIVE_ENV, "").strip().lower() == OFF:
        return None
    return installation_dir(ARCHIVE_ENV)


def spark_home() -> Path | None:
    """The Spark that ``spark-submit`` runs: ``$SPARK_HOME``, else the pyspark package's own."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def java_executable() -> Path | None:
    """The ``java`` that ``spark-class`` starts: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    if os.environ.get("JAVA_HOME"):
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        return candidate.resolve() if candidate.exists() else None
    found = shutil.which("java")
    return Path(found).resolve() if found else None


def fingerprint() -> str | None:
    """A digest of the JDK (its launcher and runtime image) and of Spark's jars (names, sizes,
    modification times): what a JVM checks an archive against. ``None`` without Java or Spark."""
    java, home = java_executable(), spark_home()
    if java is None or home is None or not (home / "jars").is_dir():
        return None
    digest = hashlib.sha256()
    runtime = java.parent.parent / "lib" / "modules"
    for path in [java, runtime] + sorted((home / "jars").glob("*.jar")):
        try:
            info = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def archive_path() -> Path | None:
    """The archive that matches this JDK and these jars (existing or not); ``None`` when off or
    when there is no Java or Spark to match."""
    where, key = archive_dir(), fingerprint()
    if where is None or key is None:
        return None
    return where / f"spark-{key}.jsa"


def java_options() -> str:
    """The JVM options that use this installation's archive, or ``""`` when there is none (or
    its path has white space, which Spark's option strings split on)."""
    path = archive_path()
    if path is None or not path.is_file() or any(c.isspace() for c in str(path)):
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto"


# --- making one ---------------------------------------------------------------------------------
def make(*, force: bool = False, out=print, quiet_when_present: bool = False) -> Path | None:
    """Make this installation's archive unless it exists (``force``: again). Returns its path,
    or ``None`` when archives are off or there is no Java or Spark. Takes about a minute."""
    target = archive_path()
    if target is None:
        out(f"no JVM archive: ${ARCHIVE_ENV} is off, or Java or Spark is missing")
        return None
    if target.is_file() and not force:
        if not quiet_when_present:
            out(f"JVM archive: {target} (exists)")
        return target
    out("making the archive of Spark's classes for this JDK and these jars (about a minute)")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=target.parent)  # noqa: SIM115 -- a probe only
        probe.close()
    except OSError as exc:
        raise JvmArchiveError(f"cannot write the archive in {target.parent} ({exc.strerror}); set "
                              f"${ARCHIVE_ENV} to a directory this user can write") from None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as scratch:
        candidate = target.parent / f".{target.name}.{os.getpid()}.tmp"
        env = {**os.environ, "TOPIC_LINEAGE_HOME": scratch, ARCHIVE_ENV: OFF}
        log = Path(scratch) / "make.log"
        try:
            for step in ("workload", "check"):
                with log.open("ab") as sink:
                    done = subprocess.run(
                        [sys.executable, "-m", STEPS_MODULE, f"--{step}", str(candidate)],
                        env=env, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        check=False)
                if done.returncode != 0 or not candidate.is_file():
                    tail = log.read_text(errors="replace")[-3000:]
                    raise JvmArchiveError(f"making the JVM archive failed at its {step} "
                                       f"(exit {done.returncode}):\n{tail}")
            os.chmod(candidate, 0o444)
            os.replace(candidate, target)
        finally:
            candidate.unlink(missing_ok=True)
    for stale in target.parent.glob("spark-*.jsa"):
        if stale != target:
            stale.unlink(missing_ok=True)  # of jars or a JDK no longer installed
    out(f"JVM archive: {target} ({target.stat().st_size / 2**20:.0f} MiB, "
        f"made in {time.monotonic() - started:.0f} s)")
    return target


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog=f"python -m {MODULE}",
                            description="make the archive unless it exists").parse_args(argv)
    try:
        make(quiet_when_present=True)
    except JvmArchiveError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
