"""Client config files (--config) and secret redaction."""

from __future__ import annotations

import json

import pytest

from topic_lineage.kafka_config import (
    REDACTED,
    KafkaConfigError,
    client_error_text,
    is_secret_key,
    load_config,
    parse_properties,
    redact,
    redact_text,
)


def test_properties_syntax():
    text = (
        "# comment\n! also a comment\n\n"
        "bootstrap.servers = broker-1:9092,broker-2:9092\n"
        "security.protocol:SASL_SSL\n"
        "sasl.mechanism PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        "    username=\"svc\" password=\"p=w:d\";\n"
        "key\\=with\\:escapes = tab\\there\n"
        "empty.value=\n"
        "unicode=\\u00e9t\\u00E9\n"
    )
    assert parse_properties(text) == {
        "bootstrap.servers": "broker-1:9092,broker-2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="svc" password="p=w:d";',
        "key=with:escapes": "tab\there",
        "empty.value": "",
        "unicode": "été",
    }


def test_json_config_values_become_strings(tmp_path):
    path = tmp_path / "client.json"
    path.write_text(json.dumps({"bootstrap.servers": "b:9092", "enable.ssl.certificate.verification": False,
                                "socket.timeout.ms": 5000}))
    assert load_config(path) == {
        "bootstrap.servers": "b:9092",
        "enable.ssl.certificate.verification": "false",
        "socket.timeout.ms": "5000",
    }


def test_properties_file_is_loaded(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("bootstrap.servers=b:9092\n")
    assert load_config(path) == {"bootstrap.servers": "b:9092"}


@pytest.mark.parametrize(
    "content, fragment",
    [('{"sasl.password": "hunter2", ', "bad JSON"), ("[1]", "expected a JSON object"),
     ('{"a": {"b": 1}}', "must be a string, number or boolean")],
    ids=["truncated", "array", "nested"],
)
def test_bad_json_config_is_rejected_without_echoing_it(tmp_path, content, fragment):
    path = tmp_path / "client.json"
    path.write_text(content)
    with pytest.raises(KafkaConfigError) as excinfo:
        load_config(path)
    assert fragment in str(excinfo.value) and str(path) in str(excinfo.value)
    assert "hunter2" not in str(excinfo.value)


def test_missing_file(tmp_path):
    with pytest.raises(KafkaConfigError, match="no such file"):
        load_config(tmp_path / "absent.properties")


@pytest.mark.parametrize(
    "key",
    ["sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
     "sasl.jaas.config", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config",
     "SASL.PASSWORD", "schema.registry.basic.auth.credentials", "my.api.key", "token"],
)
def test_secret_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key", ["bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username", "client.id"]
)
def test_plain_keys(key):
    assert not is_secret_key(key)


def test_redact_hides_secret_values_everywhere():
    config = {"bootstrap.servers": "b:9092", "sasl.password": "hunter2",
              "client.id": "app-hunter2", "error_cb": print}
    safe = redact(config)
    assert safe["sasl.password"] == REDACTED
    assert safe["client.id"] == f"app-{REDACTED}"  # pasted into the wrong place: still hidden
    assert safe["bootstrap.servers"] == "b:9092"
    assert "hunter2" not in repr(safe)
    assert config["sasl.password"] == "hunter2"  # the original is untouched
    assert redact_text("login failed for hunter2", config) == f"login failed for {REDACTED}"


def test_client_error_text_is_one_redacted_line():
    from confluent_kafka import KafkaError, KafkaException

    exc = KafkaException(KafkaError(KafkaError._INVALID_ARG, 'Invalid value "hunter2"\nfor x'))
    text = client_error_text(exc, {"sasl.password": "hunter2"})
    assert text == f'_INVALID_ARG: Invalid value "{REDACTED}" for x'
