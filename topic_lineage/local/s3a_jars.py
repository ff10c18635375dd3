"""The jars that let Spark read and write ``s3://`` and ``s3a://`` locations, fetched once from
Maven Central at install time and kept with the installation, so that no Spark start downloads
anything (no ``spark.jars.packages``).

What is fetched is ``spark_s3a.pom.xml`` beside this module (Hadoop's S3A connector
``hadoop-aws`` 3.5.0, the version of pyspark's Hadoop client, and the AWS SDK v2 modules it
uses, not the SDK's bundle; Spark's ``PathOutputCommitProtocol`` for S3A's magic committer; the
POM says why each is there and what is left out), by Maven (``mvn dependency:copy-dependencies``;
``~/.m2`` is Maven's cache), into ``<dir>/spark-s3a-<digest>/`` where ``<dir>`` is
``$TOPIC_LINEAGE_S3A_JARS_DIR`` or ``var/topic-lineage`` in the Python installation (the
virtualenv) and ``<digest>`` is the POM's: a changed POM is fetched anew beside the old set.
A set is only used once complete (filled under a temporary name, then renamed); fetching a set
that is there does nothing. ``scripts/install.sh`` runs ``python -m topic_lineage.local.s3a_jars``.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from topic_lineage.errors import TopicLineageError
from topic_lineage.fsutil import installation_dir

DIR_ENV = "TOPIC_LINEAGE_S3A_JARS_DIR"
MODULE = "topic_lineage.local.s3a_jars"
POM = Path(__file__).with_name("spark_s3a.pom.xml")
COMPLETE = ".complete"
MARKER_JAR = "hadoop-aws-3.5.0.jar"  # the set is not complete without it


class S3aJarsError(TopicLineageError, RuntimeError):
    """The S3A jars are not there and could not be fetched."""


def _digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()[:12]


def jars_dir() -> Path:
    """Where this installation keeps the set for the current POM (fetched or not)."""
    return installation_dir(DIR_ENV) / f"spark-s3a-{_digest()}"


def is_fetched() -> bool:
    return (jars_dir() / COMPLETE).is_file()


def jar_paths() -> list[Path]:
    """The set's jars, sorted by name; :class:`S3aJarsError` saying how to fetch them when the
    set is not there (the install fetches it)."""
    if not is_fetched():
        raise S3aJarsError(
            f"Spark needs Hadoop's S3A jars for s3:// locations and they are not installed "
            f"(expected in {jars_dir()}); run: {sys.executable} -m {MODULE} (or scripts/install.sh), "
            "which fetches them once from Maven Central with Maven")
    return sorted(jars_dir().glob("*.jar"))


def fetch(*, out=None) -> Path:
    """Copy the POM's jars into :func:`jars_dir` (nothing when they are there)."""
    target = jars_dir()
    if is_fetched():
        return target
    mvn = shutil.which("mvn")
    if not mvn:
        raise S3aJarsError(
            "fetching Hadoop's S3A jars for Spark needs Maven ('mvn' is not on PATH); install it, "
            f"e.g. on Debian: apt-get install maven (or set ${DIR_ENV} to a directory holding "
            f"{target.name}/ with the jars of {POM} and a '{COMPLETE}' file)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=target.parent) as tmp:
        jars = Path(tmp) / "jars"
        command = [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                   f"-DoutputDirectory={jars}", "-DincludeScope=runtime"]
        if out:
            out(f"fetching Hadoop's S3A jars for Spark from Maven Central into {target}")
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                cwd=tmp, check=False)
        if result.returncode != 0 or not (jars / MARKER_JAR).is_file():
            tail = " ".join((result.stdout + result.stderr).split())[-400:]
            raise S3aJarsError(
                f"could not fetch Hadoop's S3A jars with Maven (mvn exited {result.returncode}: "
                f"{tail or 'no output'}); check access to Maven Central (https://repo.maven.apache.org, "
                "or the mirror in ~/.m2/settings.xml)")
        (jars / COMPLETE).write_text(_digest() + "\n")
        if target.exists():  # an incomplete earlier attempt
            shutil.rmtree(target)
        jars.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description="Fetch Hadoop's S3A jars for Spark (once; offline afterwards).").parse_args(argv)
    try:
        if not is_fetched():
            where = fetch(out=print)
            size = sum(path.stat().st_size for path in where.glob("*.jar"))
            print(f"S3A jars for Spark: {where} ({len(list(where.glob('*.jar')))} jars, "
                  f"{size / 2**20:.1f} MiB)")
    except S3aJarsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
