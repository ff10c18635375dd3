"""Directories kept in step with the object store (``Home.pull_tree`` / ``push_tree``): the
quality gate's log, results and Data Docs pages, which a gate rewrites and prunes, read by the
UI and by gates on other machines. Two working copies of one home on a real S3 server
(SeaweedFS on loopback) stand for two workers."""

from __future__ import annotations

import os

import pytest

from topic_lineage import storage
from topic_lineage import tables as t
from topic_lineage.storage.object_store import TREE_INDEX

pytestmark = [pytest.mark.s3]


@pytest.fixture
def workers(s3_bucket, tmp_path, monkeypatch):
    """``switch("a")`` / ``switch("b")``: this process acts as one worker or the other (its own
    working copy, the same home on the bucket)."""
    for key, value in s3_bucket.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(t.HOME_ENV, s3_bucket.url("home"))

    def switch(name: str):
        monkeypatch.setenv("TOPIC_LINEAGE_WORK_DIR", str(tmp_path / name))
        return t.home() / "quality"
    return switch


def _files(root) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


def test_changes_removals_and_unpushed_files_between_two_working_copies(workers, s3_bucket):
    a = workers("a")
    (a / "runs" / "v1").mkdir(parents=True)
    (a / "runs" / "v1" / "page.html").write_text("v1 page")
    (a / "runs" / "v2").mkdir()
    (a / "runs" / "v2" / "page.html").write_text("v2 page")
    (a / "log.jsonl").write_text("one\n")
    (a / "log.lock").write_text("")  # a process's own lock: never stored
    storage.home().push_tree("quality")
    assert sorted(k.removeprefix("home/quality/") for k in s3_bucket.keys("home/quality/")) == [
        TREE_INDEX, "log.jsonl", "runs/v1/page.html", "runs/v2/page.html"]

    b = workers("b")
    (b).mkdir(parents=True, exist_ok=True)
    (b / "mine.html").write_text("written on b, not pushed yet")
    storage.home().pull_tree("quality")
    assert _files(b) == {"log.jsonl": "one\n", "mine.html": "written on b, not pushed yet",
                         "runs/v1/page.html": "v1 page", "runs/v2/page.html": "v2 page"}

    a = workers("a")  # a gate on a: one more line (same size as a rewrite would be), a pruned run
    (a / "log.jsonl").write_text("one\ntwo\n")
    (a / "runs" / "v1" / "page.html").unlink()
    storage.home().push_tree("quality")
    assert "home/quality/runs/v1/page.html" not in s3_bucket.keys("home/quality/")

    b = workers("b")
    storage.home().pull_tree("quality")
    assert _files(b) == {"log.jsonl": "one\ntwo\n", "mine.html": "written on b, not pushed yet",
                         "runs/v2/page.html": "v2 page"}
    # nothing changed since: a second pull fetches nothing (the file's time stays as it was)
    before = os.stat(b / "log.jsonl").st_mtime_ns
    storage.home().pull_tree("quality")
    assert os.stat(b / "log.jsonl").st_mtime_ns == before


def test_a_file_rewritten_with_the_same_size_is_pushed_and_pulled(workers):
    a = workers("a")
    a.mkdir(parents=True, exist_ok=True)
    (a / "index.html").write_text("verdict: passed")
    storage.home().push_tree("quality")
    b = workers("b")
    storage.home().pull_tree("quality")
    assert (b / "index.html").read_text() == "verdict: passed"

    a = workers("a")
    stat = os.stat(a / "index.html")
    (a / "index.html").write_text("verdict: FAILED")  # same length
    os.utime(a / "index.html", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    storage.home().push_tree("quality")
    b = workers("b")
    storage.home().pull_tree("quality")
    assert (b / "index.html").read_text() == "verdict: FAILED"


def test_a_file_written_again_with_the_same_content_is_not_uploaded_again(workers, s3_bucket):
    """A gate rebuilds the Data Docs site, its styles and fonts (about 4 MB) included, with the
    same bytes: only what changed goes to the store."""
    a = workers("a")
    a.mkdir(parents=True, exist_ok=True)
    (a / "style.css").write_text("body { color: black }")
    (a / "index.html").write_text("run 1")
    storage.home().push_tree("quality")
    # mark the stored objects: an upload would replace the mark
    fs = s3_bucket.filesystem()
    for name in ("style.css", "index.html"):
        with fs.open_output_stream(f"{s3_bucket.name}/home/quality/{name}") as out:
            out.write(b"marked")

    (a / "style.css").write_text("body { color: black }")  # written again, a new time
    (a / "index.html").write_text("run 2")
    os.utime(a / "style.css", ns=(0, os.stat(a / "style.css").st_mtime_ns + 1_000_000))
    storage.home().push_tree("quality")

    def stored(name: str) -> bytes:
        with fs.open_input_stream(f"{s3_bucket.name}/home/quality/{name}") as data:
            return data.read()
    assert stored("style.css") == b"marked"  # the same content: not uploaded again
    assert stored("index.html") == b"run 2"
