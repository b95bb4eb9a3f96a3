"""bench.__main__: command-line options onto the run's configuration."""

from __future__ import annotations

import pytest

from bench.__main__ import build_config, parse_args
from bench.config import SYSTEMS


def test_defaults_are_the_full_run() -> None:
    config = build_config(parse_args([]))
    assert not config.quick and config.repetitions == 3 and config.systems == SYSTEMS
    assert config.batch_size == 64 and config.crop == 224 and config.run_transport


def test_quick_is_a_small_single_round() -> None:
    config = build_config(parse_args(["--quick"]))
    assert config.quick and config.repetitions == 1
    assert config.workload.num_samples < build_config(parse_args([])).workload.num_samples


def test_options_override_the_preset() -> None:
    config = build_config(parse_args([
        "--quick", "--systems", "shardstream,dataloader", "--repetitions", "5", "--samples", "640",
        "--step-ms", "10", "--no-transport", "--max-foreign-load", "0.5", "--retries", "0"]))
    assert config.systems == ("shardstream", "dataloader")
    assert config.repetitions == 5 and config.workload.num_samples == 640
    assert config.step_ms == 10 and not config.run_transport
    assert config.max_foreign_load_cores == 0.5 and config.retries == 0


@pytest.mark.parametrize("argv", [["--systems", "dataloader,pandas"], ["--repetitions", "0"],
                                  ["--retries", "-1"]])
def test_bad_options_stop_with_a_message(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        build_config(parse_args(argv))
