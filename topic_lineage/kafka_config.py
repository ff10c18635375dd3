"""librdkafka client settings from a file, and keeping their secrets out of sight.

``topic-lineage snapshot --config FILE`` passes any librdkafka setting through (SASL, SSL, ...).
FILE is a Java-style ``.properties`` file or a JSON object. Secret values (passwords, tokens,
private keys, JAAS configs) never appear in logs, error messages or stored data: everything
that reports a config goes through :func:`redact` / :func:`redact_text` first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from topic_lineage.errors import TopicLineageError

REDACTED = "[redacted]"

# A key is secret when it contains any of these (case-insensitive).
SECRET_KEY_PARTS = (
    "password",
    "passwd",
    "secret",
    "token",
    "credential",
    "sasl.jaas",
    "sasl.oauthbearer.config",
    "ssl.key",
    "ssl_key",
    "private",
    "api.key",
)


class KafkaConfigError(TopicLineageError, ValueError):
    """A client config file cannot be read or holds an invalid setting."""


def is_secret_key(key: str) -> bool:
    lowered = key.lower()
    return any(part in lowered for part in SECRET_KEY_PARTS)


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` safe to log: secret values replaced, callables named by key only."""
    safe = {}
    for key, value in config.items():
        if is_secret_key(key):
            safe[key] = REDACTED
        elif callable(value) or hasattr(value, "log"):
            safe[key] = f"<{type(value).__name__}>"
        elif isinstance(value, str):
            # A secret pasted into the wrong setting is still a secret.
            safe[key] = redact_text(value, config)
        else:
            safe[key] = value
    return safe


def secret_values(config: Mapping[str, Any]) -> list[str]:
    """The secret values of a config, longest first (so overlapping ones redact fully)."""
    values = {str(v) for k, v in config.items() if is_secret_key(k) and v not in (None, "")}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, config: Mapping[str, Any]) -> str:
    """``text`` with every secret value of ``config`` replaced (for error messages)."""
    for value in secret_values(config):
        text = text.replace(value, REDACTED)
    return text


def load_config(path: Path | str) -> dict[str, str]:
    """Settings of a ``.properties`` or JSON file (JSON when the text starts with ``{``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KafkaConfigError(f"config file {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KafkaConfigError(f"config file {path}: cannot read it ({exc})") from None
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        return _parse_json(text, path)
    return parse_properties(text, path)


def _parse_json(text: str, path: Path) -> dict[str, str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        # exc.msg and position only: the document itself may hold secrets.
        raise KafkaConfigError(
            f"config file {path}: bad JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise KafkaConfigError(f"config file {path}: expected a JSON object of settings")
    config = {}
    for key, value in data.items():
        if isinstance(value, bool):
            config[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            config[key] = str(value)
        else:
            raise KafkaConfigError(
                f"config file {path}: setting {key!r} must be a string, number or boolean, "
                f"got {type(value).__name__}"
            )
    return config


_PROPERTY_SEPARATOR = re.compile(r"(?<!\\)[=:]|(?<!\\)\s")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def parse_properties(text: str, path: Path | str = "<text>") -> dict[str, str]:
    """Java ``.properties`` syntax: ``key=value``, ``key: value`` or ``key value``; ``#``/``!``
    comments; a trailing backslash continues a line; backslash escapes."""
    config: dict[str, str] = {}
    logical: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line.startswith(("#", "!"))):
            continue
        if not pending:
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes continues the line
            pending += line[:-1]
            continue
        logical.append((start, pending + line))
        pending = ""
    if pending:
        logical.append((start, pending))
    for number, line in logical:
        match = _PROPERTY_SEPARATOR.search(line)
        if match is None:
            key, value = line, ""
        else:
            key = line[: match.start()]
            rest = line[match.end():].lstrip()
            if match.group().isspace() and rest[:1] in ("=", ":"):
                rest = rest[1:].lstrip()
            value = rest
        key = _unescape(key.strip())
        if not key:
            raise KafkaConfigError(f"config file {path}:{number}: a setting has no key")
        config[key] = _unescape(value)
    return config


def client_error_text(exc: BaseException, config: Mapping[str, Any]) -> str:
    """A librdkafka error as one line, with any secret value of ``config`` redacted."""
    error = exc.args[0] if exc.args else exc
    if hasattr(error, "str") and callable(error.str):
        text = f"{error.name()}: {error.str()}" if hasattr(error, "name") else error.str()
    else:
        text = str(error)
    return redact_text(" ".join(text.split()), config)


__all__ = [
    "REDACTED",
    "KafkaConfigError",
    "client_error_text",
    "is_secret_key",
    "load_config",
    "parse_properties",
    "redact",
    "redact_text",
]
