"""Write the gateway's config schema into the Helm chart's values.schema.json.

The chart's `config` value is the gateway's YAML config, so its schema is generated from
`gateway.config.settings.GatewayConfig` rather than written twice: `helm install` then rejects
a typo or a wrong type with the same rules the gateway applies at startup. The rest of
values.schema.json is written by hand; this replaces only `properties.config` and `$defs`.

    python deploy/values_schema.py          # rewrite the chart's values.schema.json
    python deploy/values_schema.py --check  # exit 1 when it is out of date (CI)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gateway.config.settings import GatewayConfig

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "helm/slo-gateway/values.schema.json"


def with_config_schema(values_schema: dict[str, Any]) -> dict[str, Any]:
    """values_schema with `config` and `$defs` replaced by the gateway's current config schema."""
    config = GatewayConfig.model_json_schema()
    defs = config.pop("$defs", {})
    updated = dict(values_schema)
    updated["properties"] = {**values_schema["properties"], "config": config}
    # Pydantic's references are "#/$defs/...": they resolve against the document root.
    updated["$defs"] = defs
    return updated


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    args = parser.parse_args(argv)
    current = SCHEMA_PATH.read_text()
    wanted = render(with_config_schema(json.loads(current)))
    if current == wanted:
        return 0
    if args.check:
        print(f"{SCHEMA_PATH} is out of date: run python deploy/values_schema.py", file=sys.stderr)
        return 1
    SCHEMA_PATH.write_text(wanted)
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
