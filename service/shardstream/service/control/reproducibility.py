"""A job's reproducibility manifest: everything that decides which bytes each rank receives.

``loader.manifest()`` returns it, ``state_dict()`` carries it, and a resumed
job whose dataset or pipeline changed is refused naming what changed
(client/manifest_diff.py). It holds:

- the dataset's identity: the entries as given, the format and its options,
  the fingerprint, and each shard's URL, size and version (a file's
  generation, ETag or mtime; for image folders and manifests, a group of up
  to 4,096 files with a digest of their versions), up to MAX_SHARDS of them;
- the pipeline: transform, its arguments, columns, collate, the corrupt
  policy, the code of a user transform or collate (its module's file
  hash and package version), and the files a built-in transform read
  (the tokenize transform's tokenizer.json: URL and SHA-256), with a hash
  of all of it;
- the order contract's parameters;
- the versions of what decodes on the service (shardstream, torch, pyarrow,
  Pillow, simplejpeg, tokenizers, Python, and the libjpeg-turbo of the native
  JPEG crop, or None where it is not used).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import platform
from collections.abc import Mapping
from typing import Any

from shardstream.proto.job_options import JobOptions
from shardstream.service.dataset import DatasetIndex
from shardstream.service.transforms import jpeg_crop
from shardstream.service.transforms.transform_files import TransformFile

MANIFEST_VERSION = 1
MAX_SHARDS = 1000  # listed one by one; beyond, the fingerprint stands for them
PACKAGES = {"shardstream": "shardstream", "torch": "torch", "pyarrow": "pyarrow", "pillow": "Pillow",
            "simplejpeg": "simplejpeg", "tokenizers": "tokenizers"}


def job_manifest(spec: JobOptions, index: DatasetIndex,
                 files: Mapping[str, TransformFile] | None = None) -> dict[str, Any]:
    """`files`: what the transform read besides the dataset, by argument (transform_files.py)."""
    shards = [{"url": s.url, "size": s.size, "version": s.version, "samples": s.num_rows} for s in index.shards]
    pipeline: dict[str, Any] = {
        **spec.recorded("pipeline"),  # an option recorded only when set keeps older jobs' hashes
        "code": {name: code_identity(name) for name in (spec.transform, spec.collate) if ":" in name},
    }
    if files:  # likewise: only a transform that reads a file records one
        pipeline["files"] = {arg: file.record() for arg, file in files.items()}
    pipeline["hash"] = hashlib.sha256(json.dumps(pipeline, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "version": MANIFEST_VERSION,
        "dataset": {"entries": list(spec.dataset), "format": index.format,
                    "format_args": dict(spec.format_args), "fingerprint": index.fingerprint,
                    "samples": index.num_rows, "shard_count": len(shards), "shards": shards[:MAX_SHARDS]},
        "pipeline": pipeline,
        "order": spec.recorded("order"),
        "service": {**{name: _version(dist) for name, dist in PACKAGES.items()}, "python": platform.python_version(),
                    "native_jpeg_crop": jpeg_crop.libjpeg_version() if jpeg_crop.available() else None},
    }


def code_identity(name: str) -> dict[str, str]:
    """A user transform's or collate's code: its module file's hash and its package's version."""
    module_name = name.partition(":")[0]
    identity = {"module": module_name}
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return identity
    path = getattr(module, "__file__", None)
    if path:
        with open(path, "rb") as f:
            identity["sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    version = _version(module_name.split(".")[0])
    if version:
        identity["version"] = version
    return identity


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


__all__ = ["MANIFEST_VERSION", "MAX_SHARDS", "code_identity", "job_manifest"]
