"""Structured logs: every logfmt line parses back to the values logged (quotes, spaces, newlines, `=`,
backslashes), --log-format json gives one JSON object per line, and the bound migration id is on every line."""
from __future__ import annotations

import io
import json
import logging

import pytest

from core import logs
from core.logs import JsonFormatter, LogfmtFormatter, bind_fields, log_event


def parse_logfmt(line: str) -> dict[str, str]:
    """A logfmt line as go-logfmt reads it: key=bare or key="quoted with \\ escapes", separated by spaces."""
    pairs, i = {}, 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        eq = line.index("=", i)
        key, i = line[i:eq], eq + 1
        assert key and " " not in key and '"' not in key, (key, line)
        if i < len(line) and line[i] == '"':
            end = i + 1
            while line[end] != '"':
                end += 2 if line[end] == "\\" else 1
            value, i = json.loads(line[i:end + 1]), end + 1
            assert i == len(line) or line[i] == " ", line
        else:
            end = line.find(" ", i)
            end = len(line) if end < 0 else end
            value, i = line[i:end], end
            assert '"' not in value and "=" not in value, line
        pairs[key] = value
    return pairs


@pytest.fixture
def capture():
    """(stream, logger) with the project's handler set up on a fresh stream; bound fields reset after."""
    def make(fmt: str):
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
        logger = logging.getLogger(f"stream_osc.test_logs.{fmt}")
        logger.handlers[:] = [handler]
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        return stream, logger
    saved = dict(logs._bound)
    yield make
    logs._bound.clear()
    logs._bound.update(saved)


AWKWARD = {
    "error": "(1146, \"Table 'shop._orders_new' doesn't exist\")",
    "spaces": "two words",
    "equals": "a=b",
    "newline": "first\nsecond\r\n",
    "backslash": "C:\\path\\",
    "tab": "a\tb",
    "empty": "",
    "unicode": "naïve ✓",
    "plain": "token",
}


def test_logfmt_values_with_quotes_spaces_newlines_and_equals_parse_back(capture):
    stream, logger = capture("logfmt")
    log_event(logger, 'message with "quotes" and = signs', **AWKWARD)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines                 # a newline in a value never splits the record
    parsed = parse_logfmt(lines[0])
    assert parsed["msg"] == 'message with "quotes" and = signs'
    for key, value in AWKWARD.items():
        assert parsed[key] == value, key
    assert "plain=token" in lines[0]              # a plain token stays bare


def test_logfmt_traceback_stays_on_the_line(capture):
    stream, logger = capture("logfmt")
    try:
        raise ValueError("broken\nvalue")
    except ValueError:
        logger.exception("failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert "ValueError: broken" in parse_logfmt(lines[0])["exc"]


def test_json_lines_keep_types_and_values(capture):
    stream, logger = capture("json")
    log_event(logger, "apply lag", lag_events=12, lag_s=0.5, throttled=False, reason=None, **AWKWARD)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert (doc["msg"], doc["level"], doc["logger"]) == ("apply lag", "info", "stream_osc.test_logs.json")
    assert doc["lag_events"] == 12 and doc["lag_s"] == 0.5 and doc["throttled"] is False and doc["reason"] is None
    assert all(doc[key] == value for key, value in AWKWARD.items())
    assert doc["ts"].endswith("Z")


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_bound_migration_id_is_on_every_line(capture, fmt):
    stream, logger = capture(fmt)
    bind_fields(migration=42)
    log_event(logger, "stage", stage="copy")
    logger.warning("plain message without fields")
    log_event(logging.getLogger("stream_osc.test_logs.other"), "not captured here")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    read = (lambda line: json.loads(line)) if fmt == "json" else parse_logfmt
    assert [str(read(line)["migration"]) for line in lines] == ["42", "42"]


def test_unbinding_removes_the_field_from_later_lines(capture):
    stream, logger = capture("logfmt")
    bind_fields(migration=42)
    bind_fields(migration=None)
    logger.warning("after the run")
    assert "migration" not in parse_logfmt(stream.getvalue().splitlines()[0])
