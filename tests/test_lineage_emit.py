"""OpenLineage events from the published tables (issue #41): what is emitted, once, in order,
through the client's standard configuration, to a real HTTP receiver on loopback.

The tables are written as a build publishes them (tests/published_tables.py, no Spark), with
every kind of change: created, attributes changed, renamed, deleted, re-created, and a group
that read both incarnations of `orders`, carrying its position to the second (R9). The live
scenario through the DAGs is in tests/test_dags_run.py.

Guards: every event and facet validates against the OpenLineage JSON Schemas (spec 2-0-2,
kept in the package) and ours; event times are the table's; one dataset's events arrive in
the order they happened; nothing is emitted twice; a receiver that is down, answers 500, or a
transport that is misconfigured fails with an error naming the transport, loses nothing, and
the next emission sends what is missing; nothing configured emits nothing.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest
from lineage_receiver import Receiver, by_kind
from published_tables import at, incarnation, publish

from topic_lineage.errors import TopicLineageError
from topic_lineage.lineage import emit, ledger
from topic_lineage.local.broker import free_port

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
OLD_ID, NEW_ID, PAY_ID, REN_ID = ("b8tRS7h4TJ2Vt43Dp85v2A", "306J_pu4Tiybgh3rvq-3HQ",
                                  "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw")


@pytest.fixture(autouse=True)
def openlineage_env(monkeypatch, tl_home):
    """No OpenLineage configuration but what a test sets; the client's own additions to the
    environment (it aliases OPENLINEAGE_URL into OPENLINEAGE__TRANSPORT__*) are undone."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE")}
    for key in saved:
        monkeypatch.delenv(key)
    monkeypatch.setenv(emit.WORKERS_ENV, "2")
    monkeypatch.setenv("TOPIC_LINEAGE_OPENLINEAGE_KAFKA", json.dumps({"demo": "127.0.0.1:9092"}))
    yield monkeypatch
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        del os.environ[key]
    os.environ.update(saved)


def history() -> tuple[list[dict], list[dict]]:
    """orders: created day 1, partitions 3 -> 6 on day 2, deleted day 3, re-created day 3;
    payments: created day 1, renamed to payments-v2 day 4; billing read both orders."""
    old = incarnation("k-old", CLUSTER, [{"name": "orders", "at": at(1), "topic_id": OLD_ID},
                                         {"name": "orders", "at": at(2), "topic_id": OLD_ID,
                                          "partitions": 6}],
                      cluster_alias="demo", deleted_at=at(3))
    new = incarnation("k-new", CLUSTER, [{"name": "orders", "at": at(3), "topic_id": NEW_ID}],
                      cluster_alias="demo")
    pay = incarnation("k-pay", CLUSTER, [{"name": "payments", "at": at(1), "topic_id": PAY_ID},
                                         {"name": "payments-v2", "at": at(4), "topic_id": PAY_ID,
                                          "change_type": "renamed"}], cluster_alias="demo")
    groups = [
        {"cluster_id": CLUSTER, "group_id": "billing", "incarnation_key": "k-old",
         "topic_id": OLD_ID, "topic_name": "orders", "first_seen_at": at(1, 6),
         "last_seen_at": at(2), "max_committed_offset": 10, "carried_offset": False},
        {"cluster_id": CLUSTER, "group_id": "billing", "incarnation_key": "k-new",
         "topic_id": NEW_ID, "topic_name": "orders", "first_seen_at": at(3, 1),
         "last_seen_at": at(3, 1), "max_committed_offset": 10, "carried_offset": True},
    ]
    return old + new + pay, groups


def publish_history(version: str = "v1", *, extra: list[dict] = ()) -> list[dict]:
    rows, groups = history()
    rows += list(extra)
    publish(version, rows, group_incarnations=groups)
    return rows


def http(monkeypatch, receiver: Receiver) -> None:
    monkeypatch.setenv("OPENLINEAGE_URL", receiver.url)


def http_retrying_once(monkeypatch, url: str) -> None:
    """The HTTP transport through OPENLINEAGE__TRANSPORT__* variables, retrying once at once
    (the default retries 5 times with backoff: 10 s per failing test)."""
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "http")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__URL", url)
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__RETRY", json.dumps(
        {"total": 1, "connect": 1, "read": 1, "backoff_factor": 0.01}))


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_nothing_configured_emits_nothing_and_records_nothing(capsys):
    publish_history()
    result = emit.emit_published()
    assert result.transport is None and "no OpenLineage transport is configured" in str(result)
    assert ledger.emitted_keys() == set()
    assert capsys.readouterr().out == ""  # the client alone would print every event


def test_events_reach_the_receiver_once_in_order_with_the_tables_times(monkeypatch):
    rows = publish_history()
    with Receiver() as receiver:
        http(monkeypatch, receiver)
        result = emit.emit_published()
        assert result.emitted == len(receiver.events) == 8 and "http (http://127.0.0.1" in str(result)

        kinds = by_kind(receiver.events)
        assert sorted(kinds) == sorted([
            ("CREATE", "orders", OLD_ID), ("ALTER", "orders", OLD_ID), ("DROP", "orders", OLD_ID),
            ("CREATE", "orders", NEW_ID), ("CREATE", "payments", PAY_ID),
            ("RENAME", "payments-v2", PAY_ID), ("READ", "orders", OLD_ID),
            ("READ", "orders", NEW_ID)])
        # one dataset's events arrive in the order they happened
        orders = [(k, i) for k, n, i in kinds if n == "orders"]
        assert orders == [("CREATE", OLD_ID), ("READ", OLD_ID), ("ALTER", OLD_ID),
                          ("DROP", OLD_ID), ("CREATE", NEW_ID), ("READ", NEW_ID)]
        for name in ("orders", "payments", "payments-v2"):  # per dataset: in time order
            times = [when(e["eventTime"]) for e in receiver.events
                     if name in {d["name"] for d in e["inputs"] + e["outputs"]}]
            assert times == sorted(times) and times
        # event times are the table's: valid_from of each version, deleted_at of the drop
        expected = {("CREATE", OLD_ID): at(1), ("ALTER", OLD_ID): at(2), ("DROP", OLD_ID): at(3),
                    ("CREATE", NEW_ID): at(3), ("READ", NEW_ID): at(3, 1)}
        for event, (kind, _, topic_id) in zip(receiver.events, kinds, strict=True):
            if (kind, topic_id) in expected:
                assert when(event["eventTime"]) == expected[(kind, topic_id)]
            assert event["eventType"] == "COMPLETE"
        rename = next(e for e in receiver.events if e["outputs"] and
                      e["outputs"][0]["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "RENAME")
        assert rename["outputs"][0]["facets"]["lifecycleStateChange"]["previousIdentifier"] == {
            "namespace": "kafka://127.0.0.1:9092", "name": "payments"}
        # the group's input is on the right incarnation, with the carried facet on the second
        reads = [e for e in receiver.events if e["inputs"]]
        assert [(e["job"]["name"], e["inputs"][0]["facets"]["symlinks"]["identifiers"][0]["name"],
                 "topicLineage_carriedPosition" in e["inputs"][0]["inputFacets"]) for e in reads] == [
            ("demo.consumer_group.billing", OLD_ID, False),
            ("demo.consumer_group.billing", NEW_ID, True)]
        assert reads[1]["inputs"][0]["inputFacets"]["topicLineage_carriedPosition"][
            "maxCommittedOffset"] == 10
        assert {e["outputs"][0]["namespace"] for e in receiver.events if e["outputs"]} == {
            "kafka://127.0.0.1:9092"}

        # nothing new: nothing sent again
        assert emit.emit_published().emitted == 0 and len(receiver.events) == 8
        # a new version adds one topic: only its CREATE is sent
        publish_history("v2", extra=incarnation(
            "k-ship", CLUSTER, [{"name": "shipments", "at": at(5), "topic_id": "AAAAAAAAAAAAAAAAAAAABA"}],
            cluster_alias="demo"))
        assert emit.emit_published().emitted == 1
        assert by_kind(receiver.events[8:]) == [("CREATE", "shipments", "AAAAAAAAAAAAAAAAAAAABA")]
    assert len(rows) == 5


def test_run_ids_are_stable_so_a_resent_event_is_the_same_run(monkeypatch, capsys):
    import sys

    publish_history()
    emit.emit_published(dry_run=True, out=sys.stdout)
    first = [json.loads(line)["run"]["runId"] for line in capsys.readouterr().out.splitlines()]
    emit.emit_published(dry_run=True, out=sys.stdout)
    second = [json.loads(line)["run"]["runId"] for line in capsys.readouterr().out.splitlines()]
    assert first == second and len(set(first)) == len(first) == 8
    assert ledger.emitted_keys() == set()  # a dry run records nothing


def test_since_leaves_out_what_an_older_version_already_had(monkeypatch, capsys):
    import sys

    publish_history("v1", extra=[])
    publish_history("v2", extra=incarnation(
        "k-ship", CLUSTER, [{"name": "shipments", "at": at(5), "topic_id": "AAAAAAAAAAAAAAAAAAAABA"}],
        cluster_alias="demo"))
    result = emit.emit_published(since="v1", dry_run=True, out=sys.stdout)
    lines = capsys.readouterr().out.splitlines()
    assert result.emitted == 1 and by_kind([json.loads(x) for x in lines]) == [
        ("CREATE", "shipments", "AAAAAAAAAAAAAAAAAAAABA")]
    with pytest.raises(TopicLineageError, match="does not exist"):
        emit.emit_published(since="v-missing", dry_run=True, out=sys.stdout)


def test_an_unreachable_receiver_fails_naming_the_transport_and_loses_nothing(monkeypatch):
    publish_history()
    port = free_port()
    http_retrying_once(monkeypatch, f"http://127.0.0.1:{port}")
    with pytest.raises(emit.EmissionError) as failed:
        emit.emit_published()
    message = str(failed.value)
    assert f"http (http://127.0.0.1:{port}/api/v1/lineage) transport failed" in message
    assert "0 of 8 pending event(s) were sent" in message
    assert ledger.emitted_keys() == set()
    with Receiver() as receiver:  # the receiver is back: the next run sends everything
        http_retrying_once(monkeypatch, receiver.url)
        assert emit.emit_published().emitted == 8 and len(receiver.events) == 8


def test_a_receiver_answering_500_midway_keeps_order_and_the_next_run_sends_the_rest(monkeypatch):
    publish_history()
    with Receiver() as receiver:
        http_retrying_once(monkeypatch, receiver.url)
        receiver.fail_after = 4
        with pytest.raises(emit.EmissionError, match=r"answered HTTP 500 .*\(after 1 retry\)"):
            emit.emit_published(workers=1)
        assert len(receiver.events) == 4 and len(ledger.emitted_keys()) == 4
        receiver.fail_after = None
        result = emit.emit_published(workers=1)
        assert result.emitted == 4 and result.already == 4
        kinds = by_kind(receiver.events)
        assert len(kinds) == len(set(kinds)) == 8  # nothing lost, nothing twice
        orders = [(k, i) for k, n, i in kinds if n == "orders"]
        assert orders == [("CREATE", OLD_ID), ("READ", OLD_ID), ("ALTER", OLD_ID),
                          ("DROP", OLD_ID), ("CREATE", NEW_ID), ("READ", NEW_ID)]


def async_http_retrying_once(monkeypatch, url: str) -> None:
    """The client's async HTTP transport, configured the standard way, retrying once."""
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "async_http")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__URL", url)
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__RETRY", json.dumps(
        {"total": 1, "backoff_factor": 0.01}))


def test_an_async_http_transport_records_only_what_the_receiver_acknowledged(monkeypatch):
    """``async_http`` configured: its settings are sent with in order, one acknowledgement per
    event; a receiver answering 500 midway leaves exactly the events it accepted recorded,
    the error names the transport, and the next emission sends the rest, in order."""
    publish_history()
    with Receiver() as receiver:
        async_http_retrying_once(monkeypatch, receiver.url)
        receiver.fail_after = 4
        with pytest.raises(emit.EmissionError) as failed:
            emit.emit_published(workers=1)
        message = str(failed.value)
        assert f"async_http ({receiver.url}/api/v1/lineage) transport failed" in message
        assert "answered HTTP 500" in message and "(after 1 retry)" in message
        assert "4 of 8 pending event(s) were sent and recorded" in message
        assert len(receiver.events) == 4 and receiver.refused >= 2  # an event, and its retry
        accepted = {e["run"]["runId"] for e in receiver.events}
        assert {run_id(key) for key in ledger.emitted_keys()} == accepted
        receiver.fail_after = None
        result = emit.emit_published(workers=1)
        assert result.emitted == 4 and result.already == 4 and result.transport.startswith("async_http")
        kinds = by_kind(receiver.events)
        assert len(kinds) == len(set(kinds)) == 8
        orders = [(k, i) for k, n, i in kinds if n == "orders"]
        assert orders == [("CREATE", OLD_ID), ("READ", OLD_ID), ("ALTER", OLD_ID),
                          ("DROP", OLD_ID), ("CREATE", NEW_ID), ("READ", NEW_ID)]


def run_id(key: str) -> str:
    """The run ID of the event of the change with ``key`` in the published version."""
    from topic_lineage import warehouse
    from topic_lineage.lineage.events import to_event

    with warehouse.reading() as version:
        change = next(c for c in emit.changes_of(version) if c.key == key)
        return to_event(change, version).run.runId


def test_the_client_async_transport_alone_acknowledges_nothing(monkeypatch):
    """Why ``async_http`` is not used as the client makes it: ``emit`` returns for every event
    while the receiver refuses half of them, and afterwards only counts say so, not which."""
    from openlineage.client import OpenLineageClient

    from topic_lineage.lineage.events import to_event

    publish_history()
    with Receiver() as receiver:
        async_http_retrying_once(monkeypatch, receiver.url)
        receiver.fail_after = 4
        client = OpenLineageClient()
        for change in emit.changes_of("v1"):
            client.emit(to_event(change, "v1"))  # returns: nothing says whether it arrived
        client.close()
        assert client.transport.get_stats() == {"pending": 0, "success": 4, "failed": 4}
        assert len(receiver.events) == 4


def test_an_async_http_transport_that_cannot_be_replaced_is_refused_before_sending(monkeypatch):
    """A proxy variable applies to the URL: only ``requests`` honours it, so the ordered sender
    does not take the ``async_http`` transport's place, and that transport acknowledges
    nothing: the emission refuses it, sends nothing, records nothing."""
    publish_history()
    with Receiver() as receiver:
        async_http_retrying_once(monkeypatch, receiver.url)
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        with pytest.raises(emit.EmissionError, match="async_http transport returns before"):
            emit.emit_published(workers=1)
        assert receiver.events == [] and ledger.emitted_keys() == set()


def test_the_http_transport_settings_apply_to_what_is_sent(monkeypatch, tmp_path):
    """The ``http`` transport of an openlineage.yml with an API key, a custom header and gzip:
    every request carries them, and the receiver gets the same events."""
    publish_history()
    with Receiver() as receiver:
        config = tmp_path / "openlineage.yml"
        config.write_text(
            f"transport:\n  type: http\n  url: {receiver.url}\n  compression: gzip\n"
            "  auth:\n    type: api_key\n    apiKey: secret-key\n"
            "  custom_headers:\n    X-Team: lineage\n")
        monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config))
        assert emit.emit_published(workers=1).emitted == 8
        assert len(by_kind(receiver.events)) == 8
        assert {(h["Authorization"], h["X-Team"], h["Content-Encoding"], h["Content-Type"])
                for h in receiver.headers} == {
            ("Bearer secret-key", "lineage", "gzip", "application/json")}


def test_a_composite_transport_sends_through_each_of_its_transports(monkeypatch, tmp_path):
    """A ``composite`` of ``http`` and ``file``: the HTTP part goes through the ordered sender,
    both get every event once."""
    publish_history()
    out = tmp_path / "events.jsonl"
    with Receiver() as receiver:
        config = tmp_path / "openlineage.yml"
        config.write_text(
            "transport:\n  type: composite\n  continue_on_failure: false\n  transports:\n"
            f"    - type: http\n      url: {receiver.url}\n"
            f"    - type: file\n      log_file_path: {out}\n      append: true\n")
        monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config))
        assert emit.emit_published(workers=1).emitted == 8
        assert len(receiver.events) == 8
        assert len(by_kind([json.loads(line) for line in out.read_text().splitlines()])) == 8


def test_the_ordered_sender_writes_what_the_client_serializer_writes(monkeypatch):
    """The sender's serializer against ``Serde.to_json``, on every kind of change (created,
    altered, renamed, dropped, read, read with a carried position)."""
    from openlineage.client.serde import Serde

    from topic_lineage.lineage.events import to_event
    from topic_lineage.lineage.ordered_http import to_json

    publish_history()
    events = [to_event(change, "v1") for change in emit.changes_of("v1")]
    assert len(events) == 8
    for event in events:
        assert to_json(event) == Serde.to_json(event)


def test_a_misconfigured_transport_is_a_clear_error_from_the_cli(monkeypatch, capsys, tmp_path):
    from topic_lineage import cli

    publish_history()
    config = tmp_path / "openlineage.yml"
    config.write_text("transport:\n  type: http\n  url: not a url\n")
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config))
    assert cli.main(["lineage", "emit"]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("topic-lineage lineage: error: the OpenLineage transport configured by "
                          f"OPENLINEAGE_CONFIG={config} could not be created")
    assert "\n" not in err and ledger.emitted_keys() == set()


def test_any_transport_of_the_standard_config_file_works(monkeypatch, tmp_path):
    """The file transport from an openlineage.yml: the same events, one JSON per line."""
    publish_history()
    out = tmp_path / "events.jsonl"
    config = tmp_path / "openlineage.yml"
    config.write_text(f"transport:\n  type: file\n  log_file_path: {out}\n  append: true\n")
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config))
    result = emit.emit_published(workers=1)
    assert result.transport == "file" and result.emitted == 8
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(by_kind(events)) == 8


# --- the events against the OpenLineage JSON Schemas (spec 2-0-2) and ours --------------------
def validators():
    from jsonschema import Draft202012Validator, FormatChecker
    from referencing import Registry, Resource

    from topic_lineage.lineage.events import schema_path

    resources = []
    for name in ("openlineage/OpenLineage.json",
                 "openlineage/facets/LifecycleStateChangeDatasetFacet.json",
                 "openlineage/facets/SymlinksDatasetFacet.json",
                 "TopicIncarnationDatasetFacet.json", "CarriedPositionInputDatasetFacet.json"):
        schema = json.loads(schema_path(name).read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    registry = Registry().with_resources(resources)

    def validator(url: str):
        return Draft202012Validator({"$ref": url}, registry=registry,
                                    format_checker=FormatChecker())
    return validator


def test_every_event_and_facet_validates_against_the_pinned_schemas(capsys):
    import sys

    from topic_lineage.lineage.events import CARRIED_FACET, INCARNATION_FACET

    publish_history()
    emit.emit_published(dry_run=True, out=sys.stdout)
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(events) == 8
    validator = validators()
    checked = set()
    for event in events:
        validator(event["schemaURL"]).validate(event)
        for dataset in event["inputs"] + event["outputs"]:
            for name, facet in {**dataset["facets"], **dataset.get("inputFacets", {})}.items():
                validator(facet["_schemaURL"]).validate(facet)
                checked.add(name)
    assert checked == {"lifecycleStateChange", "symlinks", INCARNATION_FACET, CARRIED_FACET}

    # the schemas can fail: a facet without its incarnation key, a bad topic ID, a bad event
    facet = dict(events[0]["outputs"][0]["facets"][INCARNATION_FACET])
    bad = validator(facet["_schemaURL"])
    assert not bad.is_valid({k: v for k, v in facet.items() if k != "incarnationKey"})
    assert not bad.is_valid({**facet, "topicId": "not-an-id"})
    assert not validator(events[0]["schemaURL"]).is_valid({**events[0], "eventType": "DONE"})
    assert not validator(events[0]["schemaURL"]).is_valid({**events[0], "run": {}})
    # (jsonschema checks "date-time" only with rfc3339-validator installed; parse them here)
    assert all(when(e["eventTime"]).tzinfo is not None for e in events)


def test_the_kept_spec_is_the_one_the_installed_client_writes():
    """The schemas in the package are the spec version (and facet versions) whose URLs the
    pinned client puts in every event: an upgrade of the client that moves them fails here."""
    from openlineage.client.event_v2 import RunEvent
    from openlineage.client.facet_v2 import lifecycle_state_change_dataset, symlinks_dataset

    from topic_lineage.lineage.events import schema_path

    for url, name in (
        (RunEvent._get_schema(), "openlineage/OpenLineage.json"),
        (lifecycle_state_change_dataset.LifecycleStateChangeDatasetFacet._get_schema(),
         "openlineage/facets/LifecycleStateChangeDatasetFacet.json"),
        (symlinks_dataset.SymlinksDatasetFacet._get_schema(),
         "openlineage/facets/SymlinksDatasetFacet.json"),
    ):
        assert url.split("#")[0] == json.loads(schema_path(name).read_text())["$id"]


def test_our_facet_schemas_ship_in_the_package_with_the_spec_license():
    from topic_lineage.lineage.events import SCHEMA_BASE, schema_path

    for name in ("TopicIncarnationDatasetFacet.json", "CarriedPositionInputDatasetFacet.json"):
        assert json.loads(schema_path(name).read_text())["$id"] == SCHEMA_BASE + name
    assert "Apache License" in schema_path("openlineage/LICENSE").read_text()
    assert schema_path("openlineage/NOTICE.txt").is_file()


def test_the_capture_records_the_namespace_of_its_topics(broker, tl_home, monkeypatch):
    from topic_lineage import capture
    from topic_lineage.lineage.namespaces import Namespaces

    monkeypatch.delenv("TOPIC_LINEAGE_OPENLINEAGE_KAFKA")
    broker.create_topics(["orders"])
    snapshot = capture.capture_snapshot("live", {"bootstrap.servers": broker.bootstrap_servers},
                                        groups=False)
    host_port = broker.bootstrap_servers.split(",")[0]
    assert Namespaces()(snapshot.cluster_id, "live") == f"kafka://{host_port}"
    assert Namespaces()("unknown-cluster", "imported") == "kafka://imported"


def test_a_large_export_goes_through_worker_processes_once_and_in_order(monkeypatch):
    """More than PROCESS_MIN pending changes: sent by two worker processes, in batches; every
    event arrives once, valid against the OpenLineage schema, and each dataset's events in
    time order."""
    from topic_lineage.topic_id import canonical

    rows = []
    for n in range(700):  # 700 incarnations, every other one deleted: 1,050 events
        rows += incarnation(f"k{n}", CLUSTER, [{"name": f"t{n % 50}", "at": at(1 + n % 7),
                                                "topic_id": canonical((n + 7).to_bytes(16, "big"))}],
                            cluster_alias="demo", deleted_at=at(9 + n % 5) if n % 2 else None)
    publish("v-large", rows)
    with Receiver() as receiver:
        http(monkeypatch, receiver)
        result = emit.emit_published(workers=2, batch=400)
        assert result.emitted == 1050 > emit.PROCESS_MIN and len(receiver.events) == 1050
        assert len({e["run"]["runId"] for e in receiver.events}) == 1050
        validator = validators()  # made in worker processes, with attrs' validators off
        for event in receiver.events:
            validator(event["schemaURL"]).validate(event)
        assert len(list((ledger.ledger_dir() / "emitted").glob("*.json"))) == 3  # 400+400+250
        for name in {f"t{n}" for n in range(50)}:
            times = [when(e["eventTime"]) for e in receiver.events
                     if e["outputs"][0]["name"] == name]
            assert times == sorted(times)
        assert emit.emit_published(workers=2).emitted == 0


def test_a_second_emission_at_the_same_time_sends_nothing(monkeypatch):
    """Two emissions at once (the DAG's task and the CLI): the second sends nothing, says why."""
    publish_history()
    with Receiver() as receiver:
        http(monkeypatch, receiver)
        with ledger.exclusive() as held:
            assert held
            result = emit.emit_published()
            assert result.transport is None and "another OpenLineage emission" in str(result)
        assert receiver.events == []
        assert emit.emit_published().emitted == 8
