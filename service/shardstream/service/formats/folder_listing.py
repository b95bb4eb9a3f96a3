"""An image folder's classes and files, listed as torchvision's ImageFolder lists them.

``torchvision.datasets.folder``: classes are ``sorted(e.name for e in os.scandir(root) if
e.is_dir())`` (hidden directories and symlinks to directories included), and a class's files
are ``sorted(os.walk(class_dir, followlinks=True))``, each directory's files sorted by name,
those whose lower-cased name ends with an image extension (hidden files included). On a local
filesystem that is what runs here, following symlinks the same way; on an object store
(gs://, s3://), which has no links, one recursive listing gives the same order.

A file's size and version are its resolved target's (``fs.info`` follows a link), the same
identity the decoders check on every read. A symlink cycle, which would walk forever, is
refused naming the directory; a dangling link is listed (as torchvision lists it) and is one
unreadable sample.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fsspec.implementations.local import LocalFileSystem

from shardstream.proto.errors import UnreadableShard

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # torchvision's


@dataclass(frozen=True)
class ListedFile:
    path: str  # as reached from the root (through links), which names the sample
    target: str  # the resolved path: what is read, and checked against the allowed prefixes
    size: int
    info: dict[str, Any] | None  # the target's fs.info; None for a dangling link


def is_image(name: str) -> bool:
    return name.lower().endswith(IMG_EXTENSIONS)


def list_classes(fs: Any, root: str) -> list[str]:
    """The class directories' names, sorted."""
    if isinstance(fs, LocalFileSystem):
        with os.scandir(root) as entries:
            return sorted(entry.name for entry in entries if entry.is_dir())
    return sorted(posixpath.basename(entry["name"].rstrip("/")) for entry in fs.ls(root, detail=True)
                  if entry.get("type") == "directory")


def real_root(fs: Any, root: str) -> str:
    """The folder's resolved path (itself on an object store): files under it are inside the folder
    however they are reached."""
    return os.path.realpath(root) if isinstance(fs, LocalFileSystem) else root


def list_class_files(fs: Any, root: str, classes: list[str]) -> dict[str, list[ListedFile]]:
    """Each class's image files in torchvision's order: a walk per class on a local filesystem,
    one recursive listing of the root on an object store."""
    if isinstance(fs, LocalFileSystem):
        return {name: [_local_file(fs, path, real) for path, real in _walk_local(f"{root}/{name}")]
                for name in classes}
    found: dict[str, list[tuple[str, str, dict[str, Any]]]] = {name: [] for name in classes}
    for path, info in fs.find(root, detail=True).items():
        relative = path[len(root):].lstrip("/")
        name = relative.split("/", 1)[0]
        if "/" in relative and name in found and is_image(path):
            found[name].append((posixpath.dirname(path), posixpath.basename(path), info))
    return {name: [ListedFile(f"{directory}/{base}", f"{directory}/{base}", int(info.get("size") or 0), info)
                   for directory, base, info in sorted(files, key=lambda f: (f[0], f[1]))]
            for name, files in found.items()}


def _walk_local(class_dir: str) -> Iterator[tuple[str, str]]:
    """(path, the resolved path of its directory) of each image file, in torchvision's order."""
    walked = list(_walk(class_dir, os.path.realpath(class_dir), (os.path.realpath(class_dir),)))
    for directory, real, files in sorted(walked):
        for name in sorted(files):
            if is_image(name):
                yield os.path.join(directory, name), real


def _walk(directory: str, real: str, ancestors: tuple[str, ...]) -> Iterator[tuple[str, str, list[str]]]:
    """os.walk(followlinks=True)'s (directory, files), with each directory's resolved path,
    refusing a link back to an ancestor."""
    files: list[str] = []
    subdirs: list[tuple[str, bool]] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir():
                    subdirs.append((entry.name, entry.is_symlink()))
                else:
                    files.append(entry.name)
    except OSError:  # os.walk skips a directory it cannot list
        return
    yield directory, real, files
    for name, linked in subdirs:
        path = os.path.join(directory, name)
        resolved = os.path.realpath(path) if linked else os.path.join(real, name)
        if resolved in ancestors:
            raise UnreadableShard(f"image folder directory {path!r} is a symlink back to {resolved!r}: the "
                                  "folder would be walked forever")
        yield from _walk(path, resolved, (*ancestors, resolved))


def _local_file(fs: LocalFileSystem, path: str, real_directory: str) -> ListedFile:
    try:
        info = fs.info(path)  # follows a link: the target's size and version
    except FileNotFoundError:
        return ListedFile(path, os.path.realpath(path), 0, None)
    target = os.path.realpath(path) if info.get("islink") else os.path.join(real_directory, os.path.basename(path))
    return ListedFile(path, target, int(info.get("size") or 0), info)


__all__ = ["IMG_EXTENSIONS", "ListedFile", "is_image", "list_class_files", "list_classes", "real_root"]
