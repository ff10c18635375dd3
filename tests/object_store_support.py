"""What the object-store tests share: a step's process on a worker of its own (its own empty
``HOME``, ``TMPDIR`` and working copy; only the bucket and the catalog in common), the seeded
history they store, and the tables they compare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = str(ROOT / ".venv" / "bin" / "topic-lineage")

QUERIES = {
    "incarnations": "SELECT incarnation_key, cluster_id, topic_name, topic_id, version, change_type, "
                    "is_current, valid_from, valid_to, deleted_at FROM topic_incarnations "
                    "ORDER BY incarnation_key, version",
    "runs": "SELECT cluster_id, captured_at, complete, held FROM snapshot_runs "
            "ORDER BY cluster_id, captured_at",
    "offsets": "SELECT count(*) AS n, count(incarnation_key) AS attributed FROM group_offsets",
}


def store_rounds(env: dict, first: int, last: int) -> None:
    code = ("from tests.benchmarks.datagen import History; "
            f"print(History(topics=40, clusters=2, seed=11).store_rounds({first}, {last}))")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                   env=env, cwd=str(ROOT), timeout=300)


# Steps of the seeded two-cluster history (``(first, last, only)``: rounds ``first .. last-1``
# of every cluster, or of cluster ``only``), each snapshot with a consumer group that commits
# on three of its live topics (so the group tables have rows to keep and to derive again).
STORE_STEPS = """
import dataclasses, json, sys
from tests.benchmarks.datagen import History
from topic_lineage import store
from topic_lineage.snapshot import GroupObservation, GroupOffset
for first, last, only in json.loads(sys.argv[1]):
    for snaps in History(topics=40, clusters=2, seed=11).rounds(first, last):
        chosen = [s for i, s in enumerate(snaps) if only == "all" or i == int(only)]
        stored = []
        for snap in chosen:
            live = [x for x in snap.topics if x.topic_id and x.partition_count and not x.error][:3]
            offsets = tuple(GroupOffset(x.name, 0, 5 + first, 9 + first) for x in live)
            stored.append(dataclasses.replace(snap, groups_complete=True,
                                              groups=(GroupObservation("billing", "Stable", None, offsets),)))
        store.save_all(stored, "live")
"""

# The history the object-store tests store (in these steps, or some of them at a time), so that
# one local build of it is the reference of every one of them (:func:`local_tables`): rounds
# 0-3 of both clusters, then 4-5 and 6 of the first only.
HISTORY = ((0, 4, "all"), (4, 6, "0"), (6, 7, "0"))


def store_steps(env: dict, *steps: tuple[int, int, str]) -> None:
    """Store each of ``steps`` of the seeded history (:data:`STORE_STEPS`), in one process."""
    subprocess.run([sys.executable, "-c", STORE_STEPS, json.dumps(steps)], env=env, check=True,
                   capture_output=True, text=True, cwd=str(ROOT), timeout=300)


class Worker:
    """One step's process environment: the shared store and catalog, and nothing else shared."""

    def __init__(self, base: dict, root: Path):
        self.root = root
        for name in ("home", "tmp", "work"):
            (root / name).mkdir(parents=True)
        self.env = {**base, "HOME": str(root / "home"), "TMPDIR": str(root / "tmp"),
                    "TOPIC_LINEAGE_WORK_DIR": str(root / "work")}

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([CLI, *args], env=self.env, capture_output=True, text=True,
                              cwd=str(self.root), timeout=600, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"topic-lineage {' '.join(args)} exited {done.returncode}:\n"
                                 f"{done.stdout}\n{done.stderr}")
        return done


    def start(self, *args: str, **extra_env: str) -> subprocess.Popen:
        """The step in the background (its output in ``<worker>/out.txt``)."""
        out = open(self.root / "out.txt", "w")  # noqa: SIM115 - the child keeps it
        return subprocess.Popen([CLI, *args], env={**self.env, **extra_env}, stdout=out,
                                stderr=subprocess.STDOUT, cwd=str(self.root), text=True)

    def output(self) -> str:
        return (self.root / "out.txt").read_text()

    def reached(self, stage: str) -> Path:
        """The file a ``pause@<stage>`` fault creates when the step gets there."""
        return self.root / "work" / f"fault-{stage}.reached"

    def release(self, stage: str) -> None:
        (self.root / "work" / f"fault-{stage}.release").touch()


def wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the step exited with {proc.returncode} before {path.name}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} not reached in {timeout_s:.0f} s")
        time.sleep(0.1)


def shared_env(s3_env: dict, home_url: str, catalog_uri: str) -> dict:
    """The environment every step shares: the home on S3 and the catalog on PostgreSQL."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYICEBERG_", "TOPIC_LINEAGE_", "AWS_"))}
    env.update(s3_env, TOPIC_LINEAGE_HOME=home_url, TOPIC_LINEAGE_ICEBERG_CATALOG="shared",
               PYICEBERG_CATALOG__SHARED__TYPE="sql", PYICEBERG_CATALOG__SHARED__URI=catalog_uri)
    return env


# ``topic-lineage ARGS...`` for each ARGS, through the command's own entry point (its arguments,
# its output), in one process: one interpreter start instead of one per command
COMMANDS_IN_ONE = """
import contextlib, io, json, sys
from topic_lineage.cli import main
answers = []
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    if code != 0:
        sys.exit(f"topic-lineage {args} exited {code}")
    answers.append(out.getvalue())
print(json.dumps(answers))
"""


def run_commands(env: dict[str, str], cwd: Path, commands: list[list[str]]) -> list[str]:
    """What ``topic-lineage`` prints for each argument list of ``commands`` (each must exit 0),
    run one after the other in one process of their own with ``env``."""
    done = subprocess.run([sys.executable, "-c", COMMANDS_IN_ONE, json.dumps(commands)], env=env,
                          capture_output=True, text=True, cwd=str(cwd), timeout=300, check=False)
    if done.returncode != 0:
        raise AssertionError(f"the commands exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_queries(env: dict[str, str], cwd: Path, queries: list[list[str]]) -> list[str]:
    """What ``topic-lineage query`` prints for each argument list of ``queries``, run in one
    process of their own with ``env``."""
    return run_commands(env, cwd, [["query", *args] for args in queries])


def query_all(worker: Worker) -> dict[str, str]:
    """What :data:`QUERIES` answer on ``worker``."""
    return _query_all(worker.env, worker.root)


def _query_all(env: dict[str, str], cwd: Path) -> dict[str, str]:
    answers = run_queries(env, cwd, [["--format", "json", sql] for sql in QUERIES.values()])
    return dict(zip(QUERIES, answers, strict=True))


def local_tables(tmp_path_factory, steps: tuple[tuple[int, int, str], ...] = HISTORY) -> dict[str, str]:
    """What :data:`QUERIES` answer on a local home that stored ``steps`` of the seeded history
    (:func:`store_steps`) and built them in one full refresh: the tables an object-store test's
    must equal. The same steps always give the same tables, so the test session builds each
    once (a CLI build and three queries, half a minute on 2 busy cores), whichever xdist worker
    asks first: the others wait for it and read its answers from the directory the workers
    share."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    key = "-".join(f"{first}_{last}_{only}" for first, last, only in steps)
    answers = root / f"local-tables-{key}.json"
    with open(root / f"local-tables-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not answers.exists():
            where = Path(tempfile.mkdtemp(prefix=f"local-tables-{key}-", dir=root))
            env = local_env(where)
            store_steps(env, *steps)
            tables = full_build_tables(env, where)
            answers.with_suffix(".tmp").write_text(json.dumps(tables))
            answers.with_suffix(".tmp").replace(answers)
    return json.loads(answers.read_text())


def local_env(root: Path) -> dict[str, str]:
    """The environment of a home on the local disk under ``root`` (the embedded catalog)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYICEBERG_", "TOPIC_LINEAGE_"))}
    env.update(TOPIC_LINEAGE_HOME=str(root / "local-home"), HOME=str(root / "local-user"))
    return env


def full_build_tables(env: dict[str, str], cwd: Path) -> dict[str, str]:
    """What :data:`QUERIES` answer after a full refresh of the home of ``env``."""
    subprocess.run([CLI, "build", "--full-refresh"], env=env, check=True, capture_output=True,
                   timeout=600, cwd=str(cwd))
    return _query_all(env, cwd)
