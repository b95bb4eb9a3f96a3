"""What the numbers were measured on: cores, CPU model, memory, load, library versions, commit."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from typing import Any

from bench.config import REPO_ROOT

PACKAGES = ("shardstream", "torch", "ray", "tensorflow-cpu", "tensorflow", "numpy", "pyarrow",
            "pillow", "grpcio", "protobuf")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return 0.0


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_revision() -> str:
    """The commit of the working tree, with ``+dirty`` when it has uncommitted changes."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, check=True,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "client", "service", "proto"],
                               cwd=REPO_ROOT, check=True, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def load_average() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return -1.0


def gpu_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def machine_info() -> dict[str, Any]:
    return {
        "cores": os.cpu_count() or 1,
        "cpu_model": cpu_model(),
        "memory_gib": memory_gib(),
        "platform": platform.platform(),
        "gpu": gpu_available(),
        "load_average_1m_at_start": load_average(),
        "versions": versions(),
        "revision": git_revision(),
    }


__all__ = ["load_average", "machine_info"]
