"""What changed between two reproducibility manifests (the service's reproducibility.py makes them).

A resumed job whose dataset or pipeline changed would not continue the run it
resumes, so ``load_state_dict`` refuses it, naming the files and settings
that differ (a transform's own files too: another tokenizer.json). The service's package versions may change between runs (an
upgraded image): that is reported, not refused.
"""

from __future__ import annotations

from typing import Any

from shardstream.proto.mixture import mixture_changes

SHOWN = 5  # files named per kind of change
ELASTIC = {"world_size", "batch_size"}  # may change on resume (world_size x batch_size is checked apart)


def refusals(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What changed in the dataset or the pipeline, one phrase each; [] when nothing did."""
    out = _dataset(saved.get("dataset", {}), now.get("dataset", {}))
    order_was, order_is = saved.get("order", {}), now.get("order", {})
    out.extend(mixture_changes(order_was.get("mixture"), order_is.get("mixture")))
    for key in sorted((set(order_was) | set(order_is)) - ELASTIC - {"mixture"}):
        if order_was.get(key) != order_is.get(key):
            out.append(f"order {key}: {order_was.get(key)!r} -> {order_is.get(key)!r}")
    before, after = saved.get("pipeline", {}), now.get("pipeline", {})
    if before.get("hash") != after.get("hash"):
        for key in sorted((set(before) | set(after)) - {"hash", "code", "files"}):
            if before.get(key) != after.get(key):
                out.append(f"pipeline {key}: {before.get(key)!r} -> {after.get(key)!r}")
        for name in sorted(set(before.get("code", {})) | set(after.get("code", {}))):
            was, is_ = before.get("code", {}).get(name), after.get("code", {}).get(name)
            if was != is_:
                out.append(f"the code of {name!r} changed ({_code(was)} -> {_code(is_)})")
        for arg in sorted(set(before.get("files", {})) | set(after.get("files", {}))):
            was, is_ = before.get("files", {}).get(arg), after.get("files", {}).get(arg)
            if was != is_:
                out.append(f"the transform's {arg} file changed ({_file(was)} -> {_file(is_)})")
    return out


def notes(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What changed that does not stop a resume: the service's package versions."""
    before, after = saved.get("service", {}), now.get("service", {})
    return [f"{name} {before.get(name) or '?'} -> {after.get(name) or '?'}"
            for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]


def _dataset(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for key in ("entries", "format", "format_args"):
        if before.get(key) != after.get(key):
            out.append(f"dataset {key}: {before.get(key)!r} -> {after.get(key)!r}")
    if before.get("fingerprint") == after.get("fingerprint"):
        return out
    was = {s["url"]: s for s in before.get("shards", [])}
    is_ = {s["url"]: s for s in after.get("shards", [])}
    changed = [f"{url} (size {was[url]['size']} -> {is_[url]['size']}, version {was[url]['version']!r} -> "
               f"{is_[url]['version']!r})" for url in sorted(set(was) & set(is_))
               if (was[url]["size"], was[url]["version"]) != (is_[url]["size"], is_[url]["version"])]
    for what, urls in (("changed", changed), ("added", sorted(set(is_) - set(was))),
                       ("removed", sorted(set(was) - set(is_)))):
        if urls:
            more = f" and {len(urls) - SHOWN} more" if len(urls) > SHOWN else ""
            out.append(f"{len(urls)} file(s) {what}: {', '.join(urls[:SHOWN])}{more}")
    if not any("file(s)" in line for line in out):  # beyond the listed shards
        out.append(f"dataset fingerprint {before.get('fingerprint')} -> {after.get('fingerprint')} "
                   f"({before.get('shard_count')} -> {after.get('shard_count')} shards)")
    return out


def _file(identity: dict[str, str] | None) -> str:
    """A file a transform read (the tokenizer's tokenizer.json), as the manifest records it."""
    if not identity:
        return "none"
    return f"{identity.get('url')!r} sha256 {str(identity.get('sha256'))[:16]}"


def _code(identity: dict[str, str] | None) -> str:
    if not identity:
        return "none"
    return ", ".join(f"{k} {v}" for k, v in identity.items() if k != "module") or "not importable"


__all__ = ["notes", "refusals"]
