"""Builds the native JPEG crop (native/jpeg_crop.c, native/crop_batch.c) against the system's libjpeg-turbo.

Run by the wheel and editable builds (a hatch build hook, pyproject.toml) and by
``python service/build_native.py`` (``make setup`` after the C source changes).
It needs a C compiler and libjpeg-turbo's headers (Debian/Ubuntu:
``apt-get install gcc libjpeg62-turbo-dev``). Without them the build goes on
without the library, with a warning, and the service decodes JPEGs through
simplejpeg as before (transforms/jpeg_crop.py).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

SERVICE = Path(__file__).resolve().parent
SOURCES = [SERVICE / "native" / "jpeg_crop.c", SERVICE / "native" / "crop_batch.c"]
LIBRARY = SERVICE / "shardstream" / "service" / "transforms" / "_jpeg_crop.so"
FLAGS = ["-O3", "-shared", "-fPIC", "-Wall", "-Wextra"]


def _libjpeg_flags() -> list[str]:
    """pkg-config's flags for libjpeg where it knows them, else the plain library."""
    if shutil.which("pkg-config"):
        found = subprocess.run(["pkg-config", "--cflags", "--libs", "libjpeg"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            return shlex.split(found.stdout)
    return ["-ljpeg"]


def build(target: Path = LIBRARY) -> str:
    """Compile the library to `target`; "" when built, else why not."""
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler!r}) on PATH"
    partial = target.with_suffix(".so.partial")
    command = [compiler, *FLAGS, "-o", str(partial), *map(str, SOURCES), *_libjpeg_flags()]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        return f"{shlex.join(command)} failed:\n{done.stderr.strip()}"
    partial.replace(target)  # a library being loaded elsewhere is never half-written
    return ""


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script without hatchling
    BuildHookInterface = object


class NativeBuildHook(BuildHookInterface):  # type: ignore[misc, valid-type]
    """Builds the library into the source tree (an editable install runs from there); a wheel
    carries it as a platform-specific file."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        failed = build()
        if failed:
            self.app.display_warning(f"the native JPEG crop is not built ({failed}); JPEGs will decode "
                                     "through simplejpeg")
            return
        if version != "editable":
            build_data["artifacts"].append(str(LIBRARY.relative_to(Path(self.root))))
            build_data["pure_python"] = False
            build_data["infer_tag"] = True


def main() -> int:
    failed = build()
    if failed:
        sys.stderr.write(f"the native JPEG crop is not built: {failed}\n")
        return 0  # the service runs without it
    sys.stdout.write(f"built {LIBRARY}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
