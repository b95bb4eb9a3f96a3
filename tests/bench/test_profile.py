"""bench.profile: folding py-spy's raw stacks into per-process self and inclusive counts."""

from __future__ import annotations

from bench.profile import aggregate, format_profiles, process_name

RAW = [
    'process 10:"python -m shardstream.service.cli serve";process 20:"ray::DecodeWorker.decode";'
    "main_loop (ray/worker.py:10);decode (service/node/decoder.py:30);load (PIL/ImageFile.py:200) 30",
    'process 10:"python -m shardstream.service.cli serve";process 20:"ray::DecodeWorker.decode";'
    "main_loop (ray/worker.py:10);decode (service/node/decoder.py:31);augment (image.py:80) 10",
    'process 10:"python -m shardstream.service.cli serve";thread (0x1);'
    "_serve (grpc/_server.py:5);encode (proto/wire.py:9) 5",
    "not a stack line",
    "",
]


def test_process_names_are_short() -> None:
    assert process_name("ray::DecodeWorker.decode") == "ray::DecodeWorker.decode"
    assert process_name("/venv/bin/python -m bench.consumer /tmp/spec.json") == "bench.consumer"
    assert process_name("/venv/bin/python -u /x/ray/_private/log_monitor.py --a=b") == "log_monitor.py"
    assert process_name("/usr/bin/raylet --flag") == "raylet"


def test_aggregate_attributes_samples_to_the_innermost_process() -> None:
    profiles = aggregate(RAW)
    assert set(profiles) == {"ray::DecodeWorker.decode", "shardstream.service.cli"}
    decode = profiles["ray::DecodeWorker.decode"]
    assert decode.samples == 40
    assert decode.self_time["load (PIL/ImageFile.py)"] == 30
    # Line numbers are dropped, so one function counts once per stack.
    assert decode.inclusive["decode (service/node/decoder.py)"] == 40
    serve = profiles["shardstream.service.cli"]
    assert serve.self_time == {"encode (proto/wire.py)": 5}


def test_format_profiles_lists_busiest_process_first() -> None:
    text = format_profiles(aggregate(RAW), seconds=1.0, rate=50)
    assert text.index("ray::DecodeWorker.decode") < text.index("shardstream.service.cli")
    assert "75.0%  load (PIL/ImageFile.py)" in text
