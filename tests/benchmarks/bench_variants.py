"""Build time of several versions of ``topic_lineage/scd/incarnations.py``, measured in one run.

    .venv/bin/python -m tests.benchmarks.bench_variants REF [REF ...] [--topics N] [--rounds N]
        [--repeat N] [--seed N] [--keep DIR]

Each REF is a git ref (``8c2ea2b``, ``main``, ``HEAD``) whose ``topic_lineage/scd/incarnations.py``
(``spark_jobs/incarnations.py`` before it moved) is taken with ``git show``, or ``WORKTREE`` for the
file in the working tree. Every variant runs the working tree's ``spark_jobs/build.py`` (in its
own process, as in production) over a temporary copy of the working tree's ``topic_lineage``
package, put first on ``PYTHONPATH``, whose ``scd/incarnations.py`` is REF's.

One seeded history (tests/benchmarks/datagen.py: ``--topics`` live topics over 3 clusters,
``--rounds`` rounds) is generated once and copied into one home per variant, so every variant
reads the same store. Then, interleaved (variant order rotated per repetition, so that no variant
always runs first or last on a loaded machine):

``--repeat`` times: a full refresh of the history (``--full-refresh``) by each variant; then
one new snapshot of one cluster is stored and each variant builds incrementally on its full
refresh of this repetition; then the new snapshot is removed again. A run cut short still has
whole repetitions.

Times are the build's own (manifest ``seconds``: from reading the store to the written tables,
without JVM start-up) and the process wall time; the table shows medians and ratios of each
variant to the others. The quality gate and publishing are not run (not the subject). Finally the
tables each variant wrote are compared with the last variant's (full refresh and incremental):
equal row sets, or how many rows differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.run_all import PY, log, spark_env

WORKTREE = "WORKTREE"
TABLES = ("snapshot_runs", "topic_incarnations", "_state")


SOURCE = "topic_lineage/scd/incarnations.py"
OLD_SOURCE = "spark_jobs/incarnations.py"  # where it lived before issue #25


def _source(ref: str) -> str:
    if ref == WORKTREE:
        return (ROOT / SOURCE).read_text()
    for path in (SOURCE, OLD_SOURCE):
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"],
                               check=False, capture_output=True, text=True)
        if shown.returncode == 0:
            return shown.stdout
    raise SystemExit(f"{ref} has neither {SOURCE} nor {OLD_SOURCE}")


def _package(work: Path, index: int, ref: str) -> Path:
    """A directory holding the working tree's ``spark_jobs`` and ``topic_lineage`` packages,
    with REF's ``scd/incarnations.py``."""
    root = work / f"variant-{index}"
    for package in ("spark_jobs", "topic_lineage"):
        shutil.copytree(ROOT / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (root / SOURCE).write_text(_source(ref))
    return root


def _build(package_root: Path, home: Path, version: str, *, full: bool, base: str | None = None) -> dict:
    cmd = [PY, str(package_root / "spark_jobs" / "build.py"), "--version-id", version]
    if full:
        cmd.append("--full-refresh")
    if base:
        cmd += ["--base-version", base]
    env = spark_env(home, "local[*]")
    env["PYTHONPATH"] = f"{package_root}{os.pathsep}{ROOT}"
    started = time.perf_counter()
    proc = subprocess.run(cmd, check=False, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"build {version} in {home} failed ({proc.returncode}):\n"
                         f"{(proc.stdout + proc.stderr)[-3000:]}")
    manifest = json.loads((home / "warehouse" / "versions" / version / "manifest.json").read_text())
    expected = "full" if full else "incremental"
    if manifest["mode"] != expected:
        raise SystemExit(f"build {version}: expected a {expected} build, got {manifest['mode']}")
    return {"build_s": manifest["seconds"], "wall_s": round(wall, 2), "rows": manifest["row_counts"]}


def _rows(home: Path, version: str, table: str) -> set[tuple]:
    import pyarrow.parquet as pq

    path = home / "warehouse" / "versions" / version / table
    data = pq.read_table(path).to_pylist()
    return {tuple(sorted(row.items())) for row in data}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("refs", nargs="+", help=f"git refs, or {WORKTREE}")
    parser.add_argument("--topics", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--keep", type=Path, help="work directory to use and keep (default: a temp dir)")
    args = parser.parse_args(argv)

    from tests.benchmarks.datagen import History

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-variants-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        packages = [_package(work, i, ref) for i, ref in enumerate(args.refs)]
        template, plus = work / "template", work / "template-plus"
        history = History(topics=args.topics, seed=args.seed)
        os.environ["TOPIC_LINEAGE_HOME"] = str(template)
        log(f"generating {args.rounds} rounds x {args.topics} topics")
        observations = history.store_rounds(0, args.rounds)
        shutil.copytree(template, plus)
        os.environ["TOPIC_LINEAGE_HOME"] = str(plus)
        new = history.store_rounds(args.rounds, args.rounds + 1, only_cluster=0)
        homes = []
        for i in range(len(args.refs)):
            homes.append(work / f"home-{i}")
            shutil.copytree(template, homes[-1])

        times: dict[str, list[list[dict]]] = {"full": [[] for _ in args.refs],
                                              "incremental": [[] for _ in args.refs]}

        def rotated(rep: int) -> list[int]:
            order = list(range(len(args.refs)))
            return order[rep % len(order):] + order[:rep % len(order)]

        extra = sorted(p.relative_to(plus) for p in (plus / "snapshots").rglob("*") if p.is_file()
                       and not (template / p.relative_to(plus)).exists())
        for rep in range(args.repeat):
            for i in rotated(rep):
                log(f"full refresh {rep + 1}/{args.repeat}: {args.refs[i]}")
                times["full"][i].append(_build(packages[i], homes[i], f"full-{rep}", full=True))
                log(f"  {times['full'][i][-1]}")
            for home in homes:  # the new snapshot, the same file for every variant
                for relative in extra:
                    (home / relative).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(plus / relative, home / relative)
            for i in rotated(rep):
                log(f"incremental {rep + 1}/{args.repeat}: {args.refs[i]}")
                times["incremental"][i].append(
                    _build(packages[i], homes[i], f"inc-{rep}", full=False, base=f"full-{rep}"))
                log(f"  {times['incremental'][i][-1]}")
            for home in homes:  # back to the history alone for the next full refresh
                for relative in extra:
                    (home / relative).unlink()

        print(f"\n{args.topics} topics x {args.rounds} rounds (3 clusters): {observations} "
              f"observations; incremental: +1 snapshot ({new} observations); "
              f"{args.repeat} repetitions, medians\n")
        medians = {mode: [statistics.median(r["build_s"] for r in runs) for runs in per]
                   for mode, per in times.items()}
        walls = {mode: [statistics.median(r["wall_s"] for r in runs) for runs in per]
                 for mode, per in times.items()}
        names = [chr(ord("a") + i) for i in range(len(args.refs))]
        for name, ref in zip(names, args.refs):
            print(f"  ({name}) {ref}")
        header = "| build | " + " | ".join(f"({n}) s" for n in names) + " | " + " | ".join(
            f"{names[j]}/{names[i]}" for j in range(len(names)) for i in range(j)) + " |"
        print("\n" + header)
        print("|" + "---|" * (header.count("|") - 1))
        for mode in ("full", "incremental"):
            for label, figures in (("build", medians[mode]), ("process wall", walls[mode])):
                ratios = [f"{figures[j] / figures[i]:.3f}" for j in range(len(names)) for i in range(j)]
                print(f"| {mode} ({label}) | " + " | ".join(f"{x:.1f}" for x in figures) + " | "
                      + " | ".join(ratios) + " |")
        print("\nevery run (build s / wall s):")
        for mode, per in times.items():
            for name, runs in zip(names, per):
                print(f"  {mode} ({name}): " + ", ".join(f"{r['build_s']:.1f}/{r['wall_s']:.1f}" for r in runs))

        print("\noutput rows compared with the last variant's:")
        last = len(args.refs) - 1
        for version in ("full-0", "inc-0"):
            for table in TABLES:
                theirs = _rows(homes[last], version, table)
                for i in range(last):
                    ours = _rows(homes[i], version, table)
                    verdict = "equal" if ours == theirs else (
                        f"DIFFER: {len(ours - theirs)} rows only in ({names[i]}), "
                        f"{len(theirs - ours)} only in ({names[last]})")
                    print(f"  {version} {table} ({names[i]}) vs ({names[last]}): {len(ours)} rows, {verdict}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
