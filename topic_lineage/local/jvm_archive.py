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

ARCHIVE_ENV = "TOPIC_LINEAGE_JVM_ARCHIVE"
MODULE = "topic_lineage.local.jvm_archive"  # run as a script too (install.sh): not __name__
OFF = "off"


class JvmArchiveError(TopicLineageError, RuntimeError):
    """Making the archive failed; the message has the end of the output of the JVM that tried."""


def archive_dir() -> Path | None:
    """Where this installation's archives live; ``None`` when ``$TOPIC_LINEAGE_JVM_ARCHIVE`` is off."""
    setting = os.environ.get(ARCHIVE_ENV, "").strip()
    if setting.lower() == OFF:
        return None
    return Path(setting).expanduser() if setting else Path(sys.prefix) / "var" / "topic-lineage"


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
    """The JVM options that use this installation's archive, or ``""`` when there is none."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto"


# --- making one -------------------------------------------------------------------------------
def _record(day: int, topics: list[tuple[str, str, int]], groups: dict[str, int]) -> dict:
    """One snapshot of the workload's cluster: (name, topic ID, partitions) and group offsets."""
    return {
        "cluster_id": "jvm-archive", "cluster_alias": "jvm-archive",
        "captured_at": f"2026-01-{day:02d}T00:00:00Z", "complete": True,
        "topics": [{"name": name, "topic_id": topic_id, "partition_count": partitions,
                    "replication_factor": 1, "is_internal": False, "error": None}
                   for name, topic_id, partitions in topics],
        "groups_complete": True,
        "groups": [{"group_id": group, "state": "Stable", "error": None,
                    "offsets": [{"topic": "orders", "partition": 0, "committed_offset": offset,
                                 "log_end_offset": offset + 5}]}
                   for group, offset in groups.items()],
    }


ORDERS_1, ORDERS_2, PAYMENTS = "sS8XrAINTeKM7e6CvIqgxg", "JA3RiGY4ScmxXIADuAWqgA", "18D5y2tTQbuWCQZg9P-fHg"
WORKLOAD = [  # a re-creation, a partition change, a deletion, group offsets across them
    _record(1, [("orders", ORDERS_1, 1), ("payments", PAYMENTS, 2)], {"billing": 3}),
    _record(2, [("orders", ORDERS_1, 2), ("payments", PAYMENTS, 2)], {"billing": 7}),
    _record(3, [("payments", PAYMENTS, 2)], {}),
    _record(4, [("orders", ORDERS_2, 1), ("payments", PAYMENTS, 2)], {"billing": 7}),
    _record(5, [("orders", ORDERS_2, 1)], {"billing": 9}),
]


def _workload(dump_to: str) -> None:
    """What the archive is made of: a small store's builds, the way the CLI runs them, once by
    the walk and once by the set-based derivation (with and without Spark's generated code), in
    one JVM that writes its loaded classes to ``dump_to`` when it exits. Run in a process of its
    own with ``$TOPIC_LINEAGE_HOME`` a scratch directory."""
    from topic_lineage import store
    from topic_lineage.pipeline import run_build
    from topic_lineage.scd import walk
    from topic_lineage.snapshot import parse_snapshot
    from topic_lineage.spark import INTERPRETED_CONF, get_spark

    store.save_all([parse_snapshot(record) for record in WORKLOAD[:-1]], "import:jsonl")
    spark = get_spark("topic-lineage-jvm-archive", conf={
        "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC -XX:ArchiveClassesAtExit={dump_to}"})
    only_build = {"validate": False, "publish": False}  # a small version's gate runs no Spark
    run_build(spark, full_refresh=True, **only_build)  # the walk
    store.save_all([parse_snapshot(WORKLOAD[-1])], "import:jsonl")
    run_build(spark, **only_build)  # incremental
    os.environ[walk.WALK_ENV] = "0"
    run_build(spark, full_refresh=True, **only_build)  # set-based, generated code
    for key, value in INTERPRETED_CONF.items():
        spark.conf.set(key, value)
    run_build(spark, full_refresh=True, **only_build)  # set-based, interpreted
    spark.sql("SELECT count(*) FROM parquet.`{}`".format(
        next(Path(os.environ["TOPIC_LINEAGE_HOME"]).rglob("*.parquet")))).collect()
    gateway = spark.sparkContext._gateway
    spark.stop()
    # the JVM exits when its standard input closes (PySpark's gateway), and writes the archive
    # on its way out: wait for that here, not after this process is gone
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=600)


def _check(candidate: Path) -> None:
    """Start a driver JVM that must map ``candidate`` (``-Xshare:on`` fails otherwise) and run a job."""
    from topic_lineage.spark import get_spark

    spark = get_spark("topic-lineage-jvm-archive-check", conf={
        "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC -XX:SharedArchiveFile={candidate} "
                                         "-Xshare:on"})
    if spark.range(3).count() != 3:
        raise SystemExit("the check job gave a wrong count")
    spark.stop()


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
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as scratch:
        candidate = target.parent / f".{target.name}.{os.getpid()}.tmp"
        env = {**os.environ, "TOPIC_LINEAGE_HOME": scratch, ARCHIVE_ENV: OFF}
        log = Path(scratch) / "make.log"
        try:
            for step in ("workload", "check"):
                with log.open("ab") as sink:
                    done = subprocess.run(
                        [sys.executable, "-m", MODULE, f"--{step}", str(candidate)],
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
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--workload", metavar="DUMP_TO")
    parser.add_argument("--check", metavar="ARCHIVE")
    args = parser.parse_args(argv)
    if args.workload:
        _workload(args.workload)
    elif args.check:
        _check(Path(args.check))
    else:
        try:
            make(quiet_when_present=True)
        except JvmArchiveError as exc:
            print(exc, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
