"""Write tests/data/helm_chart_keys.yaml: the value keys the Helm charts of deploy/helm/ accept.

Not part of the test suite (the tests read the YAML it writes, offline). Rerun it when the chart versions
in deploy/ change, on checkouts of the chart sources::

    python tests/data/make_helm_chart_keys.py \\
        --dask-chart   helm-chart/dask            --daskhub-chart helm-chart/daskhub \\
        --jupyterhub-schema zero-to-jupyterhub-k8s/jupyterhub/values.schema.yaml \\
        --gateway-schema    dask-gateway/resources/helm/dask-gateway/values.schema.yaml \\
        --source "dask/helm-chart@<commit>" --source "..." > tests/data/helm_chart_keys.yaml

A key ending in ``.*`` takes free-form content (Kubernetes objects, maps of names, code), not checked further.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml


def keys_from_values(values, prefix="") -> set[str]:
    """Dotted paths of a values.yaml; an empty mapping is free-form (``path.*``)."""
    keys = set()
    for name, value in (values or {}).items():
        path = f"{prefix}{name}"
        if isinstance(value, dict) and value:
            keys.add(path)
            keys |= keys_from_values(value, path + ".")
        elif isinstance(value, dict):
            keys.add(path + ".*")
        else:
            keys.add(path)
    return keys


def keys_from_templates(chart: Path) -> set[str]:
    """Every ``.Values.a.b.c`` a chart's templates read (documented-but-commented keys included)."""
    keys = set()
    for template in sorted((chart / "templates").glob("*")):
        for match in re.finditer(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_-]*)+)", template.read_text()):
            parts = match.group(1).strip(".").split(".")
            for i in range(1, len(parts) + 1):
                keys.add(".".join(parts[:i]))
    return keys


def keys_from_schema(schema, prefix="") -> set[str]:
    """Dotted paths of a JSON schema (as Helm charts ship in values.schema.yaml)."""
    keys = set()
    properties = schema.get("properties") or {}
    for name, sub in properties.items():
        path = f"{prefix}{name}"
        keys.add(path)
        if isinstance(sub, dict):
            keys |= keys_from_schema(sub, path + ".")
    free = schema.get("additionalProperties") not in (None, False) or "patternProperties" in schema
    if prefix and (free or (schema.get("type") == "object" and not properties)):
        keys.add(prefix + "*")
    return keys


def close_free_forms(keys: set[str]) -> list[str]:
    """Drop the paths below a free-form key (they add nothing) and sort."""
    free = {key[:-2] for key in keys if key.endswith(".*")}
    kept = [key for key in keys if not any(key.startswith(f + ".") and key != f + ".*" for f in free)]
    return sorted(kept)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dask-chart", type=Path, required=True)
    parser.add_argument("--daskhub-chart", type=Path, required=True)
    parser.add_argument("--jupyterhub-schema", type=Path, required=True)
    parser.add_argument("--gateway-schema", type=Path, required=True)
    parser.add_argument("--source", action="append", default=[], help="Where the inputs came from (repeatable).")
    args = parser.parse_args()

    dask = keys_from_values(yaml.safe_load((args.dask_chart / "values.yaml").read_text()))
    dask |= keys_from_templates(args.dask_chart)
    daskhub = keys_from_values(yaml.safe_load((args.daskhub_chart / "values.yaml").read_text()))
    daskhub = {key for key in daskhub if not key.startswith(("jupyterhub.", "dask-gateway."))}
    jupyterhub = keys_from_schema(yaml.safe_load(args.jupyterhub_schema.read_text()))
    gateway = keys_from_schema(yaml.safe_load(args.gateway_schema.read_text()))

    print("# Value keys accepted by the Helm charts that deploy/helm/*.yaml are written for (not the charts).")
    print("# Made by tests/data/make_helm_chart_keys.py from:")
    for source in args.source:
        print(f"#   {source}")
    print("# `daskhub` lists the chart's own keys; its `jupyterhub.` and `dask-gateway.` keys are those of the")
    print("# `jupyterhub` and `dask-gateway` lists. A key ending in `.*` takes free-form content.")
    document = {
        "dask": close_free_forms(dask),
        "daskhub": close_free_forms(daskhub),
        "jupyterhub": close_free_forms(jupyterhub),
        "dask-gateway": close_free_forms(gateway),
    }
    print(yaml.safe_dump(document, sort_keys=False, width=120), end="")


if __name__ == "__main__":
    main()
