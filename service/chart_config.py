"""The Helm chart's `config:` values and their schema, written from ServiceConfig's settings.

    python service/chart_config.py          # rewrite them (make chart-config)
    python service/chart_config.py --check  # exit 1 when they are stale (make test)

values.yaml's `config:` block and the ConfigMap's keys for it (each between two
marker lines) and values.schema.json's `config` entry are generated; the
ConfigMap's other keys are the settings the chart sets itself (declared with
`chart=`). So the chart cannot drift from the service.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from shardstream.service.config import ServiceConfig
from shardstream.service.settings import Kind, Setting, declared, env_name

CHART_DIR = Path(__file__).resolve().parents[1] / "helm" / "shardstream"
BEGIN = "# ---- config: written by `make chart-config` from ServiceConfig (service/shardstream/service/config.py) ----"
END = "# ---- end of config ----"
TEMPLATE_BEGIN = "  {{- /* ---- config: written by `make chart-config` from ServiceConfig ---- */}}"
TEMPLATE_END = "  {{- /* ---- end of config ---- */}}"
WIDTH = 100


def chart_values() -> list[tuple[str, Setting, Kind, Any]]:
    """(name, setting, kind, default) of each setting the chart takes as a `config.<name>` value."""
    return [(f.name, spec, kind, f.default) for f, spec, kind in declared(ServiceConfig) if not spec.chart]


def values_block() -> str:
    lines = [BEGIN]
    lines += _comment("The service's settings, each the ConfigMap key SHARDSTREAM_<NAME IN UPPER CASE> that "
                      "the head reads from its environment (null: the service's default). The chart sets the "
                      "others itself:", "")
    lines += [f"#   {f.name}: {spec.chart}" for f, spec, _ in declared(ServiceConfig) if spec.chart]
    lines.append("config:")
    for name, spec, _, default in chart_values():
        lines += _comment(spec.help[0].upper() + spec.help[1:] + ".", "  ")
        lines.append(f"  {name}: {_yaml(default)}")
    lines.append(END)
    return "\n".join(lines) + "\n"


def configmap_block() -> str:
    lines = [TEMPLATE_BEGIN]
    lines += [f'  {env_name(name)}: {{{{ include "shardstream.configValue" .Values.config.{name} | quote }}}}'
              for name, *_ in chart_values()]
    lines.append(TEMPLATE_END)
    return "\n".join(lines) + "\n"


def config_schema() -> dict[str, Any]:
    properties = {name: _schema(spec, kind) for name, spec, kind, _ in chart_values()}
    # Helm drops a null value before validating, so a setting that may be unset is not required.
    required = sorted(name for name, _, kind, _ in chart_values() if not kind.optional)
    return {"type": "object", "properties": properties, "additionalProperties": False, "required": required}


def _schema(spec: Setting, kind: Kind) -> dict[str, Any]:
    if kind.base is tuple:
        entry: dict[str, Any] = {"type": "array", "items": {"type": "string", "minLength": 1, "pattern": "^[^,]+$"}}
    else:
        json_type = {bool: "boolean", int: "integer", float: "number", str: "string"}[kind.base]
        entry = {"type": [json_type, "null"] if kind.optional else json_type}
        for key, bound in (("minimum", spec.minimum), ("exclusiveMinimum", spec.above), ("maximum", spec.maximum)):
            if bound is not None:
                entry[key] = int(bound) if float(bound).is_integer() else bound
    entry["description"] = spec.help
    return entry


def _comment(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent + "# ", subsequent_indent=indent + "# ",
                         break_on_hyphens=False)


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, tuple):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def written(chart_dir: Path = CHART_DIR) -> dict[Path, str]:
    """values.yaml, the ConfigMap template and values.schema.json as they should read."""
    values_path, configmap_path = chart_dir / "values.yaml", chart_dir / "templates" / "configmap.yaml"
    schema_path = chart_dir / "values.schema.json"
    schema = json.loads(schema_path.read_text())
    schema["properties"]["config"] = config_schema()
    return {values_path: _between(values_path, BEGIN, END, values_block()),
            configmap_path: _between(configmap_path, TEMPLATE_BEGIN, TEMPLATE_END, configmap_block()),
            schema_path: json.dumps(schema, indent=2) + "\n"}


def _between(path: Path, begin: str, end: str, block: str) -> str:
    """`path`'s text with the lines from `begin` to `end` replaced by `block`."""
    text = path.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{path}: the marker lines {begin!r} and {end!r} are missing")
    before, rest = text.split(begin, 1)
    return before + block + rest.split(end + "\n", 1)[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the chart's files are stale")
    args = parser.parse_args(argv)
    stale = [path for path, text in written().items() if path.read_text() != text]
    if args.check:
        for path in stale:
            sys.stderr.write(f"{path} is stale: run 'make chart-config'\n")
        if not stale:
            sys.stdout.write("the chart's config values and schema are up to date\n")
        return 1 if stale else 0
    for path, text in written().items():
        if path in stale:
            path.write_text(text)
            sys.stdout.write(f"wrote {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
