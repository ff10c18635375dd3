"""``topic-lineage airflow ...``: a local Airflow that runs the topic-lineage DAGs.

``setup`` creates an Airflow home under ``$TOPIC_LINEAGE_HOME/airflow`` (a private PostgreSQL
server, LocalExecutor, the repository's ``dags/`` and ``plugins/``, a login with a generated
admin password), migrates its database and creates the connections (``kafka_default``,
``spark_default``), the cluster Variable and the pools. ``start`` runs PostgreSQL, the
api-server, scheduler, dag-processor and triggerer and prints how to sign in, open the UI and trigger a
backfill; ``stop`` ends them all; ``env`` prints the environment for running ``airflow``
commands against this home (``eval "$(topic-lineage airflow env)"``).

The deployment itself (home, state, secrets, setup, the supervisor) is
:mod:`topic_lineage.local.supervisor`; this module is only the commands.
"""

from __future__ import annotations

import argparse
import sys
import time

from topic_lineage import airflow as at
from topic_lineage.fsutil import pid_alive
from topic_lineage.local.supervisor import (
    ADMIN_USER,
    DEFAULT_PORT,
    SECRET_OPTIONS,
    SECRETS_DIR,
    _free_port,
    _running_pids,
    airflow_env,
    airflow_home,
    banner,
    load_state,
    passwords_path,
    setup,
    start,
    stop,
)


# --- the commands ----------------------------------------------------------------------------
def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "airflow", help="run the pipeline in a local Airflow (setup, start, stop, env)",
        description=__doc__.split("\n\n")[1],
    )
    cmds = p.add_subparsers(dest="airflow_command", metavar="ACTION", required=True)

    s = cmds.add_parser("setup", help="create/update the local Airflow home, connections, pool")
    s.add_argument("--bootstrap-servers", default="localhost:9092",
                   help="Kafka bootstrap servers of the connection kafka_default")
    s.add_argument("--clusters", help="JSON list of {alias, conn_id} for the Variable "
                   f"{at.CLUSTERS_VARIABLE} (default: alias 'default' on kafka_default)")
    s.add_argument("--spark-master", default="local[*]", help="master of spark_default")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help="API/UI port on 127.0.0.1")
    s.add_argument("--snapshot-schedule", help="cron of kafka_topic_snapshot (default */15 * * * *)")
    s.add_argument("--build-schedule", help="cron of topic_incarnations (default @daily)")
    s.add_argument("--archive-dir", help="archive of old snapshots ingested by backfill runs")
    s.add_argument("--kafka-config", metavar="FILE",
                   help="librdkafka settings of kafka_default (.properties or JSON), e.g. "
                   "security.protocol, sasl.*, ssl.*; stored encrypted in Airflow's database")
    s.add_argument("--object-store-conn-id", metavar="CONN_ID",
                   help="with TOPIC_LINEAGE_HOME on S3: the Airflow connection (type aws) whose "
                   "credentials, endpoint and region the tasks use (create it in the UI: Admin > "
                   "Connections); default: the environment's AWS_* variables")
    s.add_argument("--no-auth", action="store_true",
                   help="no login: every local process is an Airflow admin (throw-away demos only)")
    s.set_defaults(func=cmd_setup)

    s = cmds.add_parser("start", help="start PostgreSQL, api-server, scheduler, dag-processor, triggerer")
    s.add_argument("--detach", action="store_true", help="return once Airflow answers")
    s.set_defaults(func=cmd_start)

    s = cmds.add_parser("stop", help="stop the local Airflow and its PostgreSQL")
    s.set_defaults(func=cmd_stop)

    s = cmds.add_parser("env", help="print 'export' lines for airflow commands on this home")
    s.set_defaults(func=cmd_env)


def cmd_setup(args: argparse.Namespace) -> int:
    if _running_pids():  # its api-server holds the port: keep it
        port = load_state()["port"]
    else:
        port = _free_port(args.port)
        if args.port and port != args.port:
            print(f"port {args.port} is busy; using {port}")
    kafka_extra = None
    if args.kafka_config:
        from topic_lineage.kafka_config import load_config

        kafka_extra = load_config(args.kafka_config)
        kafka_extra.pop("bootstrap.servers", None)  # --bootstrap-servers names the brokers
    state = setup(
        bootstrap_servers=args.bootstrap_servers, clusters=args.clusters,
        spark_master=args.spark_master, port=port, snapshot_schedule=args.snapshot_schedule,
        build_schedule=args.build_schedule, archive_dir=args.archive_dir,
        kafka_extra=kafka_extra, auth=not args.no_auth,
        object_store_conn_id=args.object_store_conn_id,
    )
    login = (f"sign in as {ADMIN_USER}, password in {passwords_path()}" if state["auth"]
             else "no login (--no-auth)")
    print(f"Airflow home {airflow_home()} is ready (port {state['port']}, PostgreSQL, {login}); "
          "next: topic-lineage airflow start")
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    state = load_state()
    pids = start(state)
    from topic_lineage.local import spark_server  # long-lived Spark for queries (issue #16)

    spark_server.start_for_deployment()
    print(banner(state), flush=True)
    if args.detach:
        return 0
    try:
        while all(pid_alive(pid) for pid in pids.values()):
            time.sleep(2)
        print("an Airflow component exited; stopping the others", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop()


def cmd_stop(args: argparse.Namespace) -> int:
    stopped = stop()
    print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    import shlex

    for key, value in sorted(airflow_env(load_state()).items()):
        if key in SECRET_OPTIONS:
            # No secret in the shell's environment or history: the CLI reads it from its file.
            if SECRET_OPTIONS[key]:
                path = airflow_home() / SECRETS_DIR / SECRET_OPTIONS[key]
                print(f"export {key}_CMD={shlex.quote('cat ' + shlex.quote(str(path)))}")
            continue
        print(f"export {key}={shlex.quote(value)}")
    return 0
