"""The one durable-replace helper and the one file-lock helper every writer uses."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from topic_lineage.fsutil import file_lock, replacing, write_durably


def test_write_durably_replaces_the_whole_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "deep" / "CURRENT"
    write_durably(target, "v1\n")
    write_durably(target, b"v2\n")
    assert target.read_text() == "v2\n"
    assert os.listdir(target.parent) == ["CURRENT"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    """Invariant: a reader never sees a half-written file, and an error leaves no debris."""
    target = tmp_path / "manifest.json"
    write_durably(target, "old")
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer died")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_a_secret_is_never_readable_by_others(tmp_path):
    target = tmp_path / "passwords.json"
    with replacing(target, mode=0o600) as tmp:
        assert tmp.stat().st_mode & 0o077 == 0  # before any byte is written
        tmp.write_text("{}")
    assert target.stat().st_mode & 0o777 == 0o600


def _hold(path, ready, release):
    with file_lock(path):
        ready.set()
        release.wait(10)


def test_an_exclusive_lock_excludes_another_process_until_released(tmp_path):
    path = tmp_path / "locks" / "build.lock"
    # spawn, not fork: this test's worker may have run a Spark session and background imports
    # whose threads hold locks, which a forked child inherits held. In a fresh clone's whole
    # suite (2026-12-02) the forked holder had not taken the lock after 10 s and was left
    # running; a later test on that worker found a stopped Spark session's accumulator server
    # still accepting connections, as a child holding copies of the worker's sockets would.
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(path, ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        with file_lock(path, blocking=False) as acquired:
            assert acquired is False
        with file_lock(path, shared=True, blocking=False) as acquired:
            assert acquired is False
    finally:
        release.set()
        holder.join(30)
        if holder.is_alive():  # never left running past its test
            holder.kill()
            holder.join()
    assert holder.exitcode == 0, holder.exitcode
    with file_lock(path, blocking=False) as acquired:
        assert acquired is True


def test_shared_locks_admit_each_other_but_not_an_exclusive_one(tmp_path):
    path = tmp_path / "readers" / "v1.lock"
    with file_lock(path, shared=True) as first, file_lock(path, shared=True, blocking=False) as second:
        assert first and second
        with file_lock(path, blocking=False) as exclusive:
            assert exclusive is False
