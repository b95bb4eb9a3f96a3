"""The service's log format (service/logs.py): text, or one JSON object per line, chosen by
`--log-format` or SHARDSTREAM_LOG_FORMAT."""

from __future__ import annotations

import datetime
import json
import logging
import os
import subprocess
import sys

import pytest

from shardstream.service.logs import JsonFormatter, log_format

SCRIPT = """
import logging, sys
from shardstream.service.logs import configure_logging
configure_logging(sys.argv[1], sys.argv[2] == "json")
log = logging.getLogger("shardstream.test")
log.debug("hidden at INFO")
log.info("rank %d joined", 3)
try:
    1 / 0
except ZeroDivisionError:
    log.exception("it broke: %s", "badly")
"""


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_json_lines_carry_time_level_logger_message_and_the_traceback() -> None:
    result = _run("-c", SCRIPT, "info", "json")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2  # the traceback stays inside its record's line; DEBUG is filtered
    info, error = (json.loads(line) for line in lines)
    assert {k: info[k] for k in ("level", "logger", "message")} == {
        "level": "INFO", "logger": "shardstream.test", "message": "rank 3 joined"}
    assert "exception" not in info
    assert datetime.datetime.fromisoformat(info["time"].replace("Z", "+00:00")).tzinfo is not None
    assert error["level"] == "ERROR" and error["message"] == "it broke: badly"
    assert error["exception"].startswith("Traceback") and "ZeroDivisionError: division by zero" in error["exception"]


def test_text_is_the_familiar_format() -> None:
    result = _run("-c", SCRIPT, "DEBUG", "text")
    assert result.returncode == 0, result.stderr
    assert " DEBUG shardstream.test: hidden at INFO" in result.stderr
    assert " INFO shardstream.test: rank 3 joined" in result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stderr.splitlines()[0])


def test_a_message_that_is_not_plain_text_still_makes_one_valid_line() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "quote \" newline \n tab \t %s", (b"\xff",), None)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert json.loads(line)["message"] == "quote \" newline \n tab \t b'\\xff'"


def test_the_flag_wins_over_the_environment_which_wins_over_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHARDSTREAM_LOG_FORMAT", raising=False)
    assert log_format(None) == "text"
    monkeypatch.setenv("SHARDSTREAM_LOG_FORMAT", "JSON")
    assert log_format(None) == "json"
    assert log_format("text") == "text"
    monkeypatch.setenv("SHARDSTREAM_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="SHARDSTREAM_LOG_FORMAT must be one of text, json, got 'xml'"):
        log_format(None)


def test_the_cli_logs_json_when_asked_by_flag_or_environment() -> None:
    """`shardstream status` of an address nobody serves logs one error: here, as a JSON line."""
    cli = os.path.join(os.path.dirname(sys.executable), "shardstream")
    for args, env in (([cli, "--log-format", "json"], {}), ([cli], {"SHARDSTREAM_LOG_FORMAT": "json"})):
        result = subprocess.run([*args, "status", "127.0.0.1:1"], capture_output=True, text=True, timeout=120,
                                env={**os.environ, **env})
        assert result.returncode == 1
        [record] = [json.loads(line) for line in result.stderr.splitlines()]
        assert record["level"] == "ERROR" and record["logger"] == "shardstream"
        assert record["message"].startswith("127.0.0.1:1: ")
    refused = subprocess.run([cli, "status", "127.0.0.1:1"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "SHARDSTREAM_LOG_FORMAT": "xml"})
    assert refused.returncode == 2 and "SHARDSTREAM_LOG_FORMAT must be one of text, json" in refused.stderr
