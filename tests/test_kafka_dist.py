"""Apache Kafka's jars for the local broker (topic_lineage/local/kafka_dist.py): fetched once,
offline afterwards, and one clear line when they cannot be had."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from topic_lineage.local import kafka_dist

# fetching Kafka's jars for the local broker (an install, not a rule): the whole suite
pytestmark = pytest.mark.slow


def test_the_install_fetched_the_default_version_with_its_tools_and_a_logging_backend():
    libs = kafka_dist.libs_dir(kafka_dist.DEFAULT_VERSION)
    names = {p.name for p in libs.glob("*.jar")}
    v = kafka_dist.DEFAULT_VERSION
    assert {f"kafka_2.13-{v}.jar", f"kafka-tools-{v}.jar", f"kafka-clients-{v}.jar"} <= names
    assert any(n.startswith("log4j-slf4j-impl-") for n in names)  # Kafka 4 logs through log4j2
    assert kafka_dist.is_fetched(v)


def test_a_fetched_version_is_not_fetched_again(monkeypatch, tmp_path):
    """Present and complete: nothing runs (no Maven needed, offline)."""
    libs = tmp_path / "kafka-9.9.9" / "libs"
    libs.mkdir(parents=True)
    (libs / kafka_dist.COMPLETE).write_text("9.9.9\n")
    monkeypatch.setenv(kafka_dist.DIR_ENV, str(tmp_path))
    monkeypatch.setattr(shutil, "which", lambda name: pytest.fail(f"looked for {name}"))
    assert kafka_dist.fetch("9.9.9") == libs
    assert kafka_dist.ensure("9.9.9") == libs


def test_a_failed_fetch_is_one_line_naming_maven_central_and_the_version(tmp_path):
    """A version Maven Central does not have: the install's command prints one line, exit 2,
    and leaves no directory that could pass for the version."""
    env = {**os.environ, kafka_dist.DIR_ENV: str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", kafka_dist.MODULE, "0.0.1-no-such-kafka"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: could not fetch Apache Kafka 0.0.1-no-such-kafka's jars")
    assert "Maven Central" in line
    assert not (tmp_path / "kafka-0.0.1-no-such-kafka" / "libs").exists()
