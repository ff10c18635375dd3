"""Where the data lives: ``TOPIC_LINEAGE_HOME`` as a local path or an object-store URL
(topic_lineage.location). A location the project cannot use is one clear line and a non-zero
exit, and nothing is created for it; before #45 ``s3://bucket/home`` was taken as a relative
path and a folder named ``s3:`` appeared in the working directory."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from topic_lineage import location
from topic_lineage import tables as t
from topic_lineage.location import LocationError, ObjectStore

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("text, url, bucket, prefix", [
    ("s3://lineage/home", "s3://lineage/home", "lineage", "home"),
    ("s3://lineage/a//b/", "s3://lineage/a/b", "lineage", "a/b"),
    ("s3a://lineage", "s3a://lineage", "lineage", ""),
    ("gs://my-bucket/x", "gs://my-bucket/x", "my-bucket", "x"),
    ("abfs://data@acct.dfs.core.windows.net/tl", "abfs://data@acct.dfs.core.windows.net/tl", "data", "tl"),
], ids=["s3", "s3-slashes", "s3a-no-prefix", "gcs", "azure"])
def test_object_store_urls(text, url, bucket, prefix):
    found = location.parse(text)
    assert isinstance(found, ObjectStore)
    assert (found.url, found.bucket, found.prefix) == (url, bucket, prefix)
    assert found.url_of("snapshots/x.parquet") == f"{url}/snapshots/x.parquet"
    assert found.relative(found.url_of("a/b")) == "a/b"
    assert found.relative(found.key("a/b")) == "a/b"


def test_local_paths_and_file_urls(tmp_path):
    assert location.parse(str(tmp_path)) == tmp_path.resolve()
    assert location.parse(tmp_path.as_uri()) == tmp_path.resolve()
    assert location.parse("~/x") == Path("~/x").expanduser().resolve()


@pytest.mark.parametrize("text, says", [
    ("hdfs://nn/x", "hdfs:// is none of them"),
    ("http://host/x", "http:// is none of them"),
    ("s3:bucket/x", "write the URL as s3://bucket/prefix"),
    ("s3://", "names no bucket"),
    ("s3://Bad_Bucket/x", "is not a bucket name"),
    ("s3://b1/../x", "may not contain"),
    ("abfs://acct/x", "container@account.dfs.core.windows.net"),
])
def test_unusable_locations_are_one_clear_error(text, says):
    with pytest.raises(LocationError, match=says):
        location.parse(text)


@pytest.mark.parametrize("text, says, transient", [
    # pyarrow's words (the first as a run printed it, 2026-12-03), in buckets and keys that hold
    # 401, 403 and 503: the names an error quotes back say nothing of what went wrong
    (("When listing objects under key 'home-403/' in bucket 'bucket-57401': AWS Error NETWORK_CONNECTION "
     "during ListObjectsV2 operation: curlCode: 28, Timeout was reached; Details: Operation too slow. "
     "Less than 1 bytes/sec transferred the last 1 seconds"), "cannot reach", False),
    (("When reading information for key 'logs-401' in bucket 'logs-503': AWS Error UNKNOWN (HTTP status 403) "
     "during HeadObject operation: No response body."), "refused the credentials", False),
    (("When reading information for key 'f' in bucket 'b': AWS Error ACCESS_DENIED during HeadObject "
     "operation: No response body."), "refused the credentials", False),
    (("When uploading part for key 'k-403' in bucket 'b-401': AWS Error UNKNOWN (HTTP status 503) during "
     "UploadPart operation: Please reduce your request rate."), "logs-57401/x: When", True),
    (("When listing objects under key '' in bucket 'b-500': AWS Error NO_SUCH_BUCKET during ListObjectsV2 "
     "operation: The specified bucket does not exist"), "does not exist or is not visible", False),
    # two apostrophes of prose quote nothing: the words between them still count
    ("In bucket 'b-401': couldn't connect to server, timed out; the key's place unknown", "cannot reach", True),
])
def test_an_error_of_the_store_is_read_from_its_own_words(text, says, transient, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    store = location.parse("s3://logs-57401/x")
    assert says in location.describe_failure(store, OSError(text))
    assert location.transient(OSError(text)) is transient


def test_the_cli_refuses_an_unknown_scheme_in_one_line_and_creates_nothing(tmp_path):
    env = {**os.environ, "TOPIC_LINEAGE_HOME": "hdfs://namenode/lineage", "HOME": str(tmp_path)}
    run = subprocess.run([str(ROOT / ".venv/bin/topic-lineage"), "versions"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0, run.stderr
    assert "hdfs://namenode/lineage" in run.stderr and "s3://" in run.stderr
    assert "Traceback" not in run.stderr
    assert list(tmp_path.iterdir()) == [], "nothing is created for a location that cannot be used"


def test_an_object_store_home_works_in_a_working_copy_named_after_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", "s3://lineage/prod")
    monkeypatch.delenv("TOPIC_LINEAGE_WORK_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    work = t.home()
    assert work.parent == tmp_path / "cache" / "topic-lineage"
    assert "lineage-prod" in work.name
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", "s3://lineage/other")
    assert t.home() != work, "two homes never share a working copy"
    monkeypatch.setenv("TOPIC_LINEAGE_WORK_DIR", str(tmp_path / "mine"))
    assert t.home() == tmp_path / "mine"
    assert not any(p.name.startswith("s3:") for p in Path.cwd().iterdir())


def test_an_object_store_home_refuses_the_embedded_catalog(tmp_path, monkeypatch):
    """The embedded catalog is a file of the working copy: a publish there would be seen by no
    other process. An object-store home without a configured catalog is one clear error."""
    from topic_lineage.warehouse import iceberg

    for key in [k for k in os.environ if k.startswith("PYICEBERG_")]:
        monkeypatch.delenv(key)
    monkeypatch.delenv(iceberg.CATALOG_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOPIC_LINEAGE_HOME", "s3://lineage/prod")
    monkeypatch.setenv("TOPIC_LINEAGE_WORK_DIR", str(tmp_path / "work"))
    with pytest.raises(iceberg.CatalogError, match="Iceberg catalog every process shares"):
        iceberg.catalog_properties()


def test_the_environment_completes_a_configured_catalog_for_the_store(monkeypatch, tmp_path):
    from topic_lineage.warehouse import iceberg

    monkeypatch.setenv("TOPIC_LINEAGE_HOME", "s3://lineage/prod")
    monkeypatch.setenv("TOPIC_LINEAGE_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("PYICEBERG_CATALOG__SHARED__URI", f"sqlite:///{tmp_path}/c.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__SHARED__TYPE", "sql")
    monkeypatch.setenv(iceberg.CATALOG_ENV, "shared")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    name, props, embedded = iceberg.catalog_properties()
    assert (name, embedded) == ("shared", False)
    assert props["warehouse"] == "s3://lineage/prod/warehouse/iceberg"
    assert props["s3.endpoint"] == "http://127.0.0.1:9" and props["s3.region"] == "eu-west-1"
    monkeypatch.setenv("PYICEBERG_CATALOG__SHARED__WAREHOUSE", "s3://elsewhere/wh")
    assert iceberg.catalog_properties()[1]["warehouse"] == "s3://elsewhere/wh"
