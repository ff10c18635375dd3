"""Security for real (issue #46): a broker with a SASL_SSL listener (SCRAM-SHA-512 over TLS, a
CA and a broker certificate made here with openssl) and the standard authorizer
(``StandardAuthorizer``, KRaft), and a principal ``reader`` allowed to DESCRIBE the cluster and
only the topics whose names start with ``acl.visible.``.

- Kafka's all-topics listing leaves out what ``reader`` may not describe; a capture as ``reader``
  describes by name the topics held as live that the listing lacks, Kafka answers
  TOPIC_AUTHORIZATION_FAILED, and those topics stay present with that error: no deletion (R2),
  also when one of them really was deleted meanwhile (Kafka answers the same for a topic that
  does not exist). The same through the Airflow snapshot DAG, whose Kafka connection carries the
  SASL settings (in the connection, never on a command line).
- A wrong password, or a CA that did not sign the broker's certificate: one line, exit 2,
  nothing stored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from test_dags_run import airflow_db, airflow_env, load_dag  # noqa: F401 (the DAG tests' fixtures)

from topic_lineage import store
from topic_lineage.scd import reference

pytestmark = pytest.mark.broker

SCRIPT = Path(sys.executable).with_name("topic-lineage")
AUTH = "TOPIC_AUTHORIZATION_FAILED"
READER, READER_PASSWORD = "reader", "r3ader-Secret-46"
VISIBLE = "acl.visible."


def openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=60)
    assert done.returncode == 0, done.stderr


def make_ca_and_broker_cert(directory: Path, password: str) -> None:
    """``ca.pem`` (a CA) and ``broker.p12`` (the broker's key and a certificate for 127.0.0.1
    signed by it, with the CA's certificate); ``other-ca.pem``, a CA that signed nothing here."""
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out",
                f"{ca}.pem", "-subj", f"/CN=topic-lineage test {ca}", "-days", "2", cwd=directory)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
            "-subj", "/CN=localhost", cwd=directory)
    (directory / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                       "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "broker.pem", "-days", "2", "-extfile", "ext.cnf",
            cwd=directory)
    openssl("pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile",
            "ca.pem", "-out", "broker.p12", "-passout", f"pass:{password}", "-name", "broker",
            cwd=directory)


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    from conftest import started_broker

    from topic_lineage.local.broker import LocalBroker, SaslSsl

    tls = tmp_path_factory.mktemp("tls")
    make_ca_and_broker_cert(tls, "keystore-Pass-46")
    with LocalBroker(sasl_ssl=SaslSsl(tls / "broker.p12", "keystore-Pass-46")) as broker:
        started_broker(broker)
        admin = broker.admin()  # PLAINTEXT: the super user
        upsert = UserScramCredentialUpsertion(
            READER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
            READER_PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        acls = [
            AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                       f"User:{READER}", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, VISIBLE, ResourcePatternType.PREFIXED,
                       f"User:{READER}", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        ]
        for future in admin.create_acls(acls).values():
            future.result(timeout=30)
        broker.tls = tls  # where the CA files are, for the clients
        yield broker


def reader_config(broker, **overrides) -> dict:
    return {"bootstrap.servers": broker.sasl_ssl_bootstrap_servers, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": READER,
            "sasl.password": READER_PASSWORD, "ssl.ca.location": str(broker.tls / "ca.pem"),
            **overrides}


def snapshot_cli(home: Path, config: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """``topic-lineage snapshot --config FILE``: the password is in the file, not the command."""
    props = tmp_path / "client.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
    props.chmod(0o600)
    env = {**os.environ, "TOPIC_LINEAGE_HOME": str(home)}
    return subprocess.run([str(SCRIPT), "snapshot", "--cluster", "secure", "--config", str(props),
                           "--timeout", "15"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def stored(home: Path, monkeypatch) -> list:
    with monkeypatch.context() as mp:
        mp.setenv("TOPIC_LINEAGE_HOME", str(home))
        return [store.read_snapshot(p) for p in store.snapshot_files()]


def test_topics_the_principal_may_not_describe_are_kept_never_deleted(
    secure_broker, tmp_path, monkeypatch
):
    broker, home = secure_broker, tmp_path / "home"
    broker.reset()
    broker.create_topics([f"{VISIBLE}orders", "acl.hidden.payments", "acl.hidden.audit"])
    admin_capture = snapshot_cli(home, {"bootstrap.servers": broker.bootstrap_servers}, tmp_path)
    assert admin_capture.returncode == 0, admin_capture.stderr  # the super user sees all
    broker.delete_topics(["acl.hidden.audit"])  # really gone; reader cannot tell

    result = snapshot_cli(home, reader_config(broker), tmp_path)

    assert result.returncode == 0, result.stderr
    assert READER_PASSWORD not in result.stdout + result.stderr
    assert "2 topic(s) held as live were missing from the topic listing" in result.stderr
    assert f"2 {AUTH}" in result.stderr and "2 kept present" in result.stderr
    first, second = stored(home, monkeypatch)
    assert {t.name: t.error for t in second.topics} == {
        f"{VISIBLE}orders": None, "acl.hidden.payments": AUTH, "acl.hidden.audit": AUTH}
    assert second.topic_id(f"{VISIBLE}orders") == first.topic_id(f"{VISIBLE}orders")
    assert second.complete and second.error_topic_count == 2  # the snapshot says what it lacks
    _, rows = reference.derive([first, second])
    assert {r["topic_name"]: r["deleted_at"] for r in rows} == {
        f"{VISIBLE}orders": None, "acl.hidden.payments": None, "acl.hidden.audit": None}


@pytest.mark.parametrize(("setting", "value", "says"), [
    ("sasl.password", "not-the-password", "Authentication failed"),
    ("ssl.ca.location", "other-ca.pem", "certificate verify failed"),
], ids=["wrong-password", "unknown-ca"])
def test_a_wrong_password_or_an_unknown_ca_is_one_line_and_stores_nothing(
    secure_broker, tmp_path, setting, value, says
):
    home = tmp_path / "home"
    if setting == "ssl.ca.location":
        value = str(secure_broker.tls / value)
    result = snapshot_cli(home, reader_config(secure_broker, **{setting: value}), tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("topic-lineage snapshot: error: "), lines
    assert says in lines[0] and "nothing was stored" in lines[0]
    assert READER_PASSWORD not in result.stderr and "not-the-password" not in result.stderr
    assert not (home / "snapshots").exists() or not any((home / "snapshots").rglob("*.parquet"))


@pytest.mark.slow  # one dag.test() and the module's Airflow db migrate
@pytest.mark.airflow
def test_the_airflow_snapshot_dag_captures_through_a_sasl_ssl_connection(
    secure_broker, request, monkeypatch, tl_home
):
    """The Kafka connection's extra carries the SASL_SSL settings (Airflow keeps them in the
    connection: nothing secret on a command line). The hidden topic stays present (R2)."""
    broker = secure_broker
    broker.reset()
    broker.create_topics([f"{VISIBLE}orders", "acl.hidden.payments"])
    from topic_lineage.capture import capture_snapshot

    store.save(capture_snapshot("live", {"bootstrap.servers": broker.bootstrap_servers}), "live")
    request.getfixturevalue("airflow_env")({"live": "unused:1"})
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_LIVE", json.dumps(
        {"conn_type": "kafka", "extra": reader_config(broker)}))

    run = load_dag("kafka_topic_snapshot").test()

    assert run.state == "success"
    first, second = (store.read_snapshot(p) for p in store.snapshot_files())
    assert {t.name: t.error for t in second.topics} == {
        f"{VISIBLE}orders": None, "acl.hidden.payments": AUTH}
    assert second.complete and second.cluster_id == first.cluster_id == broker.cluster_id
