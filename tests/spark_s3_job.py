"""One Spark session against S3, in a process of its own, for tests/test_spark_s3.py and the
measurements: a process has one driver JVM, and S3A's jars must be on it from its start
(``spark.jars`` is read when the JVM is launched), so each scenario starts a fresh one.

    python -m tests.spark_s3_job '{"action": "roundtrip", "url": "s3://bucket/x", ...}'

prints one JSON line (the last line of its output): what the test asserts on (:func:`run_job`
starts it and returns that line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_job(spec: dict, env: dict[str, str], timeout: float = 300) -> dict:
    """This module in a new process (and so a new driver JVM); its JSON answer."""
    done = subprocess.run([sys.executable, "-m", "tests.spark_s3_job", json.dumps(spec)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)
    lines = done.stdout.strip().splitlines()
    assert lines, f"no answer (exit {done.returncode}):\n{done.stderr[-3000:]}"
    answer = json.loads(lines[-1])
    assert "crash" not in answer, answer["crash"] + "\n" + done.stderr[-2000:]
    return answer


def _process_lines(jvm_pid: int) -> list[str]:
    """The command lines of the driver JVM and of every process above it up to this one."""
    import psutil

    lines, proc = [], psutil.Process(jvm_pid)
    while proc is not None and proc.pid != os.getppid():
        lines.append(" ".join(proc.cmdline()))
        proc = proc.parent()
    return lines


def _listing(spark, url: str) -> list[str]:
    """Every object under ``url`` (recursive), as the JVM's Hadoop file system lists it."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(url)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    found, files = [], fs.listFiles(path, True)
    while files.hasNext():
        found.append(str(files.next().getPath()))
    return sorted(found)


def _read_text(spark, url: str) -> str:
    """A small file's text, read by the JVM's Hadoop file system (Spark's readers skip files whose
    names start with ``_``)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(url)
    stream = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).open(path)
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def _failed_write(frame, url: str) -> dict | None:
    """``frame`` written as Parquet at ``url``: None, or how it failed (after how long)."""
    t0 = time.monotonic()
    try:
        frame.write.mode("error").parquet(url)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which asserts on it
        return {"error_s": time.monotonic() - t0, "error_type": type(exc).__name__,
                "error": str(exc)[:4000]}
    return None


def run(spec: dict) -> dict:
    started = time.monotonic()
    from pyspark.sql import functions as F

    from topic_lineage.spark import get_spark

    spark = get_spark("spark-s3-test", master=spec.get("master", "local[2]"),  # a few rows: C1 only
                      conf=spec.get("conf") or {}, locations=spec.get("locations", ()), quick_jit=True)
    sc = spark.sparkContext
    jvm_pid = sc._jvm.java.lang.ProcessHandle.current().pid()
    result: dict = {"session_s": time.monotonic() - started, "jvm_pid": jvm_pid,
                    "conf": dict(sc.getConf().getAll()), "cmdlines": _process_lines(jvm_pid)}
    try:
        with open(f"/proc/{jvm_pid}/maps") as maps:
            result["maps_archive"] = any(line.rstrip().endswith(".jsa") for line in maps)
    except OSError:
        result["maps_archive"] = None
    if spec.get("action") == "session":
        spark.range(1).count()
        result["first_job_s"] = time.monotonic() - started
        return result
    rows = int(spec.get("rows", 1000))
    frame = spark.range(0, rows, 1, int(spec.get("partitions", 4))).select(
        F.col("id"), (F.col("id") * 7 % 1000).alias("bucket"),
        F.concat(F.lit("topic-"), F.col("id").cast("string")).alias("name"))
    url = spec["url"]
    t0 = time.monotonic()
    failed = _failed_write(frame, url)
    if failed:
        # the writes expected to fail too (``also``: URLs), in this session: a JVM start less
        # than a process each
        result.update(failed, also=[_failed_write(frame, other) for other in spec.get("also", ())])
        return result
    result["write_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    back = spark.read.parquet(url)
    result["count"] = back.count()
    result["same_rows"] = back.exceptAll(frame).count() == 0 and frame.exceptAll(back).count() == 0
    result["read_s"] = time.monotonic() - t0
    result["listing"] = _listing(spark, url)
    # the committer that wrote it: S3A's committers leave a JSON manifest as _SUCCESS (the
    # classic FileOutputCommitter an empty file)
    success = _read_text(spark, f"{url}/_SUCCESS")
    result["success_committer"] = json.loads(success).get("committer") if success.strip() else None
    if spec.get("placement"):
        from tests.servers.standalone import task_placement

        result["placement"] = task_placement(spark, 2)
    spark.stop()
    return result


if __name__ == "__main__":
    try:
        outcome = run(json.loads(sys.argv[1]))
    except Exception:  # noqa: BLE001 - the test shows it
        outcome = {"crash": traceback.format_exc()[-4000:]}
    print(json.dumps(outcome, default=str))
