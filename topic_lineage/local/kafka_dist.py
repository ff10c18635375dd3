"""Apache Kafka's jars for the local broker, fetched once from Maven Central and kept with the
installation, so that starting a broker afterwards needs no network.

``scripts/install.sh`` runs ``python -m topic_lineage.local.kafka_dist`` (the default version);
``scripts/test.sh`` also fetches :data:`COMPAT_VERSION`, the 3.9 line the live capture and
consumer-group tests also run against. What is fetched: ``org.apache.kafka:kafka_2.13`` (the
broker, ``kafka.Kafka``, and ``kafka.tools.StorageTool``) and ``org.apache.kafka:kafka-tools``
(``org.apache.kafka.tools.TopicCommand``, what ``kafka-topics.sh`` runs) with their runtime
dependencies, plus a logging backend for 4.x (3.9 brings reload4j), by Maven
(``mvn dependency:copy-dependencies``; ``~/.m2`` is Maven's cache). They go to
``<dir>/kafka-<version>/libs`` where ``<dir>`` is ``$TOPIC_LINEAGE_KAFKA_DIR`` or
``var/topic-lineage`` in the Python installation (the virtualenv), beside the JVM archive.
A version is only used once its directory is complete (it is filled under a temporary name and
renamed); fetching a version that is there does nothing.

Beside the jars, the install makes a class-data-sharing archive of the classes a broker loads
(:func:`make_archive`; HotSpot's dynamic CDS, as :mod:`topic_lineage.local.jvm_archive` does for
Spark): every JVM of that version (the storage format, the broker, Kafka's tools) maps it and
starts in less than half the time (measured 2026-11-27 on 2 loaded cores: a broker ready in
10-13 s instead of 25-36 s, the format in 2.2 s instead of 5-8 s). Its name carries a
fingerprint of the JDK and the jars, so after an upgrade of either it is not used (the JVMs start
without it); ``$TOPIC_LINEAGE_KAFKA_ARCHIVE=off`` never uses one.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from topic_lineage.errors import TopicLineageError
from topic_lineage.fsutil import installation_dir

DEFAULT_VERSION = "4.4.0"  # the newest Kafka Maven Central served on 2026-11-27
COMPAT_VERSION = "3.9.2"  # the newest 3.9.x, the last line with ZooKeeper and KRaft side by side
VERSION_ENV = "TOPIC_LINEAGE_KAFKA_VERSION"
DIR_ENV = "TOPIC_LINEAGE_KAFKA_DIR"
ARCHIVE_ENV = "TOPIC_LINEAGE_KAFKA_ARCHIVE"
MODULE = "topic_lineage.local.kafka_dist"
COMPLETE = ".complete"

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- topic-lineage: the jars of the local Apache Kafka broker (topic_lineage/local/kafka_dist.py) -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>topic-lineage</groupId>
  <artifactId>local-kafka</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>{version}</version>
    </dependency>{extra}
  </dependencies>
</project>
"""
# Kafka 4 logs through log4j2 but leaves the SLF4J binding to the distribution; 3.9 depends on
# slf4j-reload4j itself.
_LOG4J2_BINDING = """
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>2.25.5</version>
    </dependency>"""


class KafkaDistError(TopicLineageError, RuntimeError):
    """Apache Kafka's jars are not there and could not be fetched."""


def default_version() -> str:
    return os.environ.get(VERSION_ENV, "").strip() or DEFAULT_VERSION


def major(version: str) -> int:
    return int(version.split(".", 1)[0])


def base_dir() -> Path:
    return installation_dir(DIR_ENV)


def libs_dir(version: str) -> Path:
    return base_dir() / f"kafka-{version}" / "libs"


def is_fetched(version: str) -> bool:
    return (libs_dir(version) / COMPLETE).is_file()


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` or the ``java`` on PATH; one clear line when there is none."""
    if os.environ.get("JAVA_HOME"):
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("java")
    if not found:
        raise KafkaDistError(
            "the local Apache Kafka broker needs Java 17 or newer: no 'java' on PATH (and no "
            "$JAVA_HOME/bin/java); install it, e.g. on Debian: apt-get install openjdk-17-jre-headless"
        )
    return found


def ensure(version: str | None = None) -> Path:
    """The ``libs`` directory of Kafka ``version``, fetched first if it is not there."""
    version = version or default_version()
    if not is_fetched(version):
        fetch(version)
    return libs_dir(version)


def fetch(version: str, *, out=None) -> Path:
    """Copy Kafka ``version``'s jars into :func:`libs_dir` (nothing when they are there)."""
    target = libs_dir(version)
    if is_fetched(version):
        return target
    java_executable()  # Maven and the broker both need it: say so first
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaDistError(
            f"fetching Apache Kafka {version}'s jars for the local broker needs Maven ('mvn' is "
            "not on PATH); install it, e.g. on Debian: apt-get install maven (or set "
            f"{DIR_ENV} to a directory holding kafka-{version}/libs with the jars and a "
            f"'{COMPLETE}' file)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".kafka-{version}-", dir=target.parent) as tmp:
        tmp = Path(tmp)
        (tmp / "pom.xml").write_text(_POM.format(
            version=version, extra=_LOG4J2_BINDING if major(version) >= 4 else ""))
        jars = tmp / "libs"
        command = [mvn, "-q", "-B", "-f", str(tmp / "pom.xml"), "dependency:copy-dependencies",
                   f"-DoutputDirectory={jars}", "-DincludeScope=runtime"]
        if out:
            out(f"fetching Apache Kafka {version}'s jars from Maven Central into {target}")
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                check=False)
        if result.returncode != 0 or not any(jars.glob(f"kafka_2.13-{version}.jar")):
            tail = " ".join((result.stdout + result.stderr).split())[-400:]
            raise KafkaDistError(
                f"could not fetch Apache Kafka {version}'s jars with Maven (mvn exited "
                f"{result.returncode}: {tail or 'no output'}); check access to Maven Central "
                "(https://repo.maven.apache.org, or the mirror in ~/.m2/settings.xml) and that "
                "the version exists"
            )
        (jars / COMPLETE).write_text(version + "\n")
        if target.exists():  # an incomplete earlier attempt
            shutil.rmtree(target)
        jars.rename(target)
    return target


def classpath(version: str) -> str:
    return str(libs_dir(version) / "*")


def fingerprint(version: str) -> str:
    """A digest of the JDK (its launcher and runtime image) and of the version's jars (names,
    sizes, modification times): what a JVM checks an archive against."""
    java = Path(java_executable()).resolve()
    digest = hashlib.sha256(str(java).encode())
    for path in [java, java.parent.parent / "lib" / "modules",
                 *sorted(libs_dir(version).glob("*.jar"))]:
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def archive_path(version: str) -> Path:
    return libs_dir(version).parent / f"classes-{fingerprint(version)}.jsa"


def usable_archive(version: str) -> Path | None:
    """The version's class archive when one matches this JDK and these jars (and it is not off)."""
    if os.environ.get(ARCHIVE_ENV, "").strip().lower() == "off" or not is_fetched(version):
        return None
    path = archive_path(version)
    return path if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description="Fetch Apache Kafka's jars for the local broker (once; offline afterwards).")
    parser.add_argument("versions", nargs="*", help=f"Kafka versions (default: {DEFAULT_VERSION})")
    parser.add_argument("--with-compat", action="store_true",
                        help=f"also {COMPAT_VERSION}, which the tests run against too")
    parser.add_argument("--no-archive", action="store_true",
                        help="do not make the class archive that halves a broker's start")
    args = parser.parse_args(argv)
    versions = args.versions or [default_version()]
    if args.with_compat:
        versions.append(COMPAT_VERSION)
    try:
        for version in versions:
            if not is_fetched(version):
                fetch(version, out=print)
                print(f"Apache Kafka {version}: {libs_dir(version)}")
    except KafkaDistError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for version in [] if args.no_archive else versions:
        if archive_path(version).is_file():
            continue
        # made by a broker of that version (topic_lineage.local.broker), in a process of its own;
        # only a matter of speed: a failure warns and goes on
        made = subprocess.run([sys.executable, "-m", "topic_lineage.local.broker", "--class-archive",
                               version], check=False)
        if made.returncode != 0:
            print(f"warning: no class archive for Apache Kafka {version}; its JVMs start "
                  "without it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
