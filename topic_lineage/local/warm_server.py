"""The warm process itself (:mod:`topic_lineage.local.warm` is the caller's side, and starts
and stops it): loads the modules a ``build`` or ``validate`` needs, then forks a child per
request that becomes the caller's command.

    python -m topic_lineage.local.warm_server SOCKET
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import socket
import sys

from topic_lineage.local.warm import SERVED_ENV

_PRELOAD = (
    "pandas", "pyarrow.parquet", "pyarrow.dataset", "duckdb", "pyspark.sql", "pyspark.sql.functions",
    "topic_lineage.quality.gate",
    "topic_lineage.pipeline", "topic_lineage.scd.build", "topic_lineage.local.spark_server",
)


def _code_stamp() -> list:
    """Size and modification time of every Python file of the package and of ``spark_jobs``:
    a change after the warm process started makes it decline (it runs the code it loaded)."""
    import topic_lineage

    roots = [os.path.dirname(topic_lineage.__file__)]
    spec = importlib.util.find_spec("spark_jobs")  # found, not imported (it imports pyspark)
    if spec is not None and spec.origin:
        roots.append(os.path.dirname(spec.origin))
    stamp = []
    for root in roots:
        for directory, _dirs, names in os.walk(root):
            for name in sorted(names):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(directory, name))
                    stamp.append((os.path.join(directory, name), st.st_size, st.st_mtime_ns))
    return sorted(stamp)


def serve(socket_path: str) -> None:
    """Load the modules, then serve requests on ``socket_path`` until SIGTERM."""
    import threading

    from topic_lineage.quality.gx_import import import_gx

    import_gx()  # Great Expectations and our expectations, without what the gate never runs
    for name in _PRELOAD:
        importlib.import_module(name)
    from topic_lineage import cli

    cli.build_parser()  # every command module imported
    loaded = _code_stamp()
    import topic_lineage

    package = os.path.dirname(topic_lineage.__file__)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    old_umask = os.umask(0o177)  # the socket: owner only
    try:
        listener.bind(socket_path)
    finally:
        os.umask(old_umask)
    listener.listen(16)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"warm process {os.getpid()} serving {socket_path}", flush=True)
    try:
        while True:
            conn, _ = listener.accept()
            with conn:
                _serve_one(conn, listener, loaded, package, threading.active_count())
    finally:
        listener.close()
        if os.path.exists(socket_path):
            os.unlink(socket_path)


def _receive(conn) -> tuple[dict, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            raise ValueError("the request ended early")
        data += more
    return json.loads(data), fds


def _serve_one(conn, listener, loaded: list, package: str, threads: int) -> None:
    try:
        request, fds = _receive(conn)
    except (OSError, ValueError) as exc:
        print(f"bad request: {exc}", flush=True)
        return
    try:
        uid = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        peer_uid = int.from_bytes(uid[4:8], sys.byteorder)
        declined = (
            "another user" if peer_uid != os.getuid()
            else "another interpreter" if request.get("python") != sys.executable
            else "another installation" if request.get("package") != package
            else "threads are running" if threads != 1
            else "the code changed since the warm process started" if _code_stamp() != loaded
            else None
        )
        if declined or len(fds) != 3:
            conn.sendall(json.dumps({"declined": declined or "no streams"}).encode() + b"\n")
            print(f"declined: {declined or 'no streams'}", flush=True)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        # The child runs the command only once the caller has its pid: a command that ends at
        # once (a usage error) would otherwise send its exit status first, the caller would take
        # it for a refusal and run the command itself, and this process would write to a closed
        # connection. A caller gone meanwhile gets nothing run for it.
        go_read, go_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            listener.close()
            os.close(go_write)
            if os.read(go_read, 1) != b"1":
                os._exit(1)
            os.close(go_read)
            _child(conn, request, fds)  # never returns
        os.close(go_read)
        try:
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        except OSError as exc:
            os.close(go_write)  # the child exits without running anything
            print(f"caller gone before child {pid} started: {exc}", flush=True)
            return
        os.write(go_write, b"1")
        os.close(go_write)
        print(f"child {pid}: topic-lineage {' '.join(request['argv'])}", flush=True)
    finally:
        for fd in fds:
            os.close(fd)


def _child(conn, request: dict, fds: list[int]) -> None:
    """The forked child: become the caller's command, run it, send its exit status."""
    code = 1
    try:
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        sys.stdin = open(0, "r", closefd=False)  # noqa: SIM115 - the process's own streams
        sys.stdout = open(1, "w", buffering=1 if os.isatty(1) else -1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
        os.chdir(request["cwd"])
        os.umask(int(request["umask"]))
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[SERVED_ENV] = str(os.getppid())
        sys.argv = ["topic-lineage", *request["argv"]]
        from topic_lineage import cli

        try:
            code = cli.main(request["argv"])
        except SystemExit as exc:  # argparse: --help, a usage error
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - the caller sees it on its stderr
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
        finally:
            os._exit(code)


def main() -> None:
    serve(sys.argv[1])


if __name__ == "__main__":
    main()
