"""The archive of Spark's classes (topic_lineage/local/jvm_archive.py): the install makes it,
a CLI build's driver loads Spark's classes from it, and an archive of other jars or another JDK,
or one that failed to be made, is never used (a JVM that maps a broken archive crashes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from topic_lineage.local import jvm_archive, jvm_archive_steps

CLI = [sys.executable, "-c", "import sys; from topic_lineage import cli; sys.exit(cli.run())"]


def _env(**extra: str) -> dict:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **extra}


@pytest.mark.slow  # an install's start-up optimisations, proved on a CLI build: the whole suite
def test_the_install_made_the_archive_and_a_cli_build_loads_spark_from_it(tmp_path):
    """A CLI build over a small store: its driver loads Spark's classes from the archive the
    install made, and compiles with C1 only (the quick JIT, read from the build's Spark event
    log; tests/test_spark_session.py builds with the small-input settings off, without it)."""
    from tests.benchmarks.bench_small import driver_java_options, event_log_submit_args
    from topic_lineage.spark import QUICK_JIT_OPTION

    installed = jvm_archive.archive_path()
    assert installed is not None and installed.is_file(), (
        "scripts/install.sh makes the archive (python -m topic_lineage.local.jvm_archive)")
    if jvm_archive.ARCHIVE_ENV not in os.environ:  # install.sh's place: the venv's
        assert installed.parent == Path(sys.prefix) / "var" / "topic-lineage"
    home, history = tmp_path / "home", tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps(record) + "\n" for record in jvm_archive_steps.WORKLOAD))
    subprocess.run(CLI + ["import", str(history)],
                   env=_env(TOPIC_LINEAGE_HOME=str(home)), check=True, capture_output=True)
    # every JVM of the build logs where each class came from (%p: one file per process)
    logs, events = tmp_path / "classes", tmp_path / "events"
    logs.mkdir()
    events.mkdir()
    done = subprocess.run(
        CLI + ["build", "--master", "local[2]"], capture_output=True, text=True, check=False,
        env=_env(TOPIC_LINEAGE_HOME=str(home),
                 JDK_JAVA_OPTIONS=f"-Xlog:class+load=info:file={logs}/%p.log",
                 PYSPARK_SUBMIT_ARGS=event_log_submit_args(events)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert QUICK_JIT_OPTION in driver_java_options(events)
    driver = max(logs.glob("*.log"), key=lambda path: path.stat().st_size)  # the launcher's is small
    # Spark's classes, each from a jar or from the archive (the "top" layer: the JDK's own
    # archive is the base); lambdas and generated classes are neither, and not counted
    spark = [line for line in driver.read_text(errors="replace").splitlines()
             if "] org.apache.spark." in line]
    from_archive = sum("source: shared objects file (top)" in line for line in spark)
    from_jars = sum("source: file:" in line or "source: jar:" in line for line in spark)
    # a build runs no SQL query (its tasks derive the group tables too): about 2,250 of Spark's
    # classes load (2026-12-02; over 3,000 while the group tables were a Spark SQL job)
    assert from_archive > 1500
    assert from_archive > 20 * from_jars, (from_archive, from_jars)


def test_an_archive_of_other_jars_or_another_jdk_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setenv(jvm_archive.ARCHIVE_ENV, str(tmp_path))
    key = jvm_archive.fingerprint()
    assert key
    (tmp_path / "spark-0123456789abcdef.jsa").write_bytes(b"made for other jars")
    assert jvm_archive.java_options() == ""
    (tmp_path / f"spark-{key}.jsa").write_bytes(b"x")
    assert jvm_archive.java_options() == f"-XX:SharedArchiveFile={tmp_path}/spark-{key}.jsa -Xshare:auto"
    # another jar (an upgrade of Spark) changes the fingerprint: the old file no longer matches
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    for jar in sorted((jvm_archive.spark_home() / "jars").glob("*.jar"))[:3]:
        os.symlink(jar, jars / jar.name)
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    assert jvm_archive.fingerprint() not in (None, key)
    assert jvm_archive.java_options() == ""
    monkeypatch.setenv(jvm_archive.ARCHIVE_ENV, "off")
    assert jvm_archive.archive_path() is None and jvm_archive.java_options() == ""


def test_a_failed_making_leaves_no_archive_and_says_why(tmp_path):
    where = tmp_path / "archives"
    # the JVM refuses to start: the workload fails at once
    done = subprocess.run(CLI + ["jvm-archive"], capture_output=True, text=True, check=False,
                          env=_env(**{jvm_archive.ARCHIVE_ENV: str(where),
                                      "JDK_JAVA_OPTIONS": "-XX:+NoSuchOptionForThisTest"}))
    assert done.returncode == 2
    assert "topic-lineage jvm-archive: error: making the JVM archive failed at its workload" in done.stderr
    assert "NoSuchOptionForThisTest" in done.stderr
    assert list(where.iterdir()) == []  # neither an archive nor a partial one


def test_the_command_leaves_an_existing_archive_alone():
    installed = jvm_archive.archive_path()
    before = installed.stat().st_mtime_ns
    done = subprocess.run(CLI + ["jvm-archive"], capture_output=True, text=True, env=_env(), check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"JVM archive: {installed} (exists)"
    assert installed.stat().st_mtime_ns == before


def test_a_directory_it_cannot_write_is_named_with_what_to_do(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    done = subprocess.run(CLI + ["jvm-archive"], capture_output=True, text=True, check=False,
                          env=_env(**{jvm_archive.ARCHIVE_ENV: str(blocked / "archives")}))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"topic-lineage jvm-archive: error: cannot write the archive in {blocked / 'archives'} "
        f"(Not a directory); set ${jvm_archive.ARCHIVE_ENV} to a directory this user can write")
