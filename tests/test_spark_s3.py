"""Spark reads and writes Parquet at ``s3://`` URLs on an S3-compatible server (SeaweedFS on the
loopback address), configured from the environment as AWS's tools are (issue #45):

- a session writes with S3A's magic committer and reads the same rows back, leaving no
  ``_temporary`` or ``__magic`` objects; the secret is neither a Spark setting nor on any
  command line of the driver's processes: on a two-worker standalone cluster, where the
  executors write and read through S3 themselves (they share no directory with the driver),
  with the S3A jars the driver hands them: in tests/test_object_store_home.py, on the same
  cluster as a build of a home on S3 (one cluster's start for both; the builds of a home on S3
  there in ``local[2]`` write their tables through the same writer);
- a wrong secret fails in seconds, with one error naming the refusal, and so does an endpoint
  that does not answer (both in one session).

Each scenario runs in a process of its own (``tests/spark_s3_job.py``): the S3A jars must be on
the driver JVM from its start, and this test process's JVM may be another test module's.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from tests.spark_s3_job import run_job
from topic_lineage.spark import object_store_conf

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]
ACCESS_KEY = "tl-test-access"  # the settings' unit test's identity (no server)
SECRET_KEY = "tl-test-secret-5f2a9c1e7b"  # a value no Spark setting could hold by chance


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_bucket_m(s3_server):
    """A bucket of this module's on the session's S3 server (its secret is random per server:
    no Spark setting could hold it by chance)."""
    bucket = s3_server.new_bucket("spark-s3")
    yield bucket
    if s3_server.running:
        bucket.delete()


def s3_env(bucket, secret: str | None = None) -> dict[str, str]:
    """The environment a user sets for an S3-compatible server: AWS's variables, no Spark setting."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env.update(bucket.env())
    if secret is not None:
        env["AWS_SECRET_ACCESS_KEY"] = secret
    return env


def test_settings_follow_the_environment_and_carry_no_secret():
    """Only an s3:// or s3a:// location brings the settings; endpoint, path style and region come
    from AWS's variables; no value is a credential."""
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:2",
           "AWS_REGION": "eu-west-1", "AWS_SESSION_TOKEN": "tok-123"}
    assert object_store_conf(["/tmp/home", None, "file:///x"], env) == {}
    conf = object_store_conf(["/tmp/home", "s3://bucket/home"], env)
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:2"  # the S3 one wins
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.committer.name"] == "magic"
    jars = conf["spark.jars"].split(",")
    assert any(Path(jar).name == "hadoop-aws-3.5.0.jar" for jar in jars)
    assert all(Path(jar).is_file() for jar in jars)
    for secret in (SECRET_KEY, ACCESS_KEY, "tok-123"):
        assert not any(secret in value for value in conf.values())
    on_aws = object_store_conf(["s3a://bucket/x"], {})
    assert "spark.hadoop.fs.s3a.endpoint" not in on_aws  # AWS itself: the SDK's own endpoint
    assert "spark.hadoop.fs.s3a.aws.credentials.provider" not in on_aws  # S3A's chain: roles


def test_a_wrong_secret_and_an_endpoint_that_does_not_answer_fail_quickly_with_one_clear_error(s3_bucket_m):
    """S3 refuses the signature (403): S3A does not retry that, so the write fails in seconds,
    before any task, with one ``AccessDeniedException`` (in PySpark a ``Py4JJavaError``).
    Connection refused (another bucket, whose endpoint no server answers: S3A's per-bucket
    setting, in the same session): the SDK's and S3A's retries are few (S3_RETRY_CONF), so the
    write fails in seconds, not after S3A's default minute of growing pauses."""
    nowhere = f"http://127.0.0.1:{_free_port()}"
    answer = run_job({"action": "roundtrip", "url": s3_bucket_m.url("wrong/x"), "rows": 10,
                      "locations": [s3_bucket_m.url()], "also": ["s3://nowhere/none/x"],
                      "conf": {"spark.hadoop.fs.s3a.bucket.nowhere.endpoint": nowhere}},
                     s3_env(s3_bucket_m, secret="not-the-secret"))
    assert answer.get("error_type"), answer
    print(f"\nwrong secret: {answer['error_type']} after {answer['error_s']:.1f} s: "
          f"{answer['error'][:600]}")
    assert answer["error_s"] < 20, answer
    # S3A's first request is a HEAD of the output path (does it exist?): its 403 has no body, so
    # the error says Forbidden, not SignatureDoesNotMatch; S3A makes it an AccessDeniedException
    # naming the URL
    first_line = answer["error"].splitlines()[1]
    assert first_line.startswith(": java.nio.file.AccessDeniedException: s3://"), first_line
    assert "Status Code: 403" in first_line, first_line

    [refused] = answer["also"]
    assert refused and refused.get("error_type"), answer
    assert refused["error_s"] < 30, refused
    assert ": java.net.ConnectException: getFileStatus on s3://nowhere/" in refused["error"], \
        refused["error"][:600]


@pytest.mark.skipif(shutil.which("mvn") is None, reason="no Maven")
def test_the_jars_are_installed_and_small():
    from topic_lineage.local import s3a_jars

    jars = s3a_jars.jar_paths()
    names = {jar.name for jar in jars}
    assert {"hadoop-aws-3.5.0.jar", "s3-2.57.8.jar", "spark-hadoop-cloud_2.13-4.1.1.jar"} <= names
    # not the SDK's bundle, nor what pyspark's jars/ has (Netty's x.y.z.Final, httpclient 4)
    assert not [name for name in names if name.startswith(("bundle-", "httpclient-"))
                or name.endswith(".Final.jar")]
    assert sum(jar.stat().st_size for jar in jars) < 20 * 2**20
