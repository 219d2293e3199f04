"""The node-type catalog (``node_types.yaml``): named server designs plus per-group overrides."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hscommon.errors import UserError
from topologies._util import read_yaml, user_error_from_validation
from topologies.config import NodeType, renamed_node_fields

CATALOG_FILE = Path(__file__).with_name("node_types.yaml")


@lru_cache(maxsize=8)
def _load(path: str) -> dict[str, NodeType]:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError("a node-type catalog must be a mapping of name -> node type", file=path)
    out: dict[str, NodeType] = {}
    for name, entry in data.items():
        try:
            out[str(name)] = NodeType.model_validate(entry)
        except ValidationError as exc:
            raise user_error_from_validation(exc, path, prefix=str(name)) from None
    return out


def node_types(catalog: str | Path | None = None) -> dict[str, NodeType]:
    """All catalog entries (name -> NodeType); ``catalog`` defaults to the bundled file."""
    return dict(_load(str(catalog or CATALOG_FILE)))


def node_type(name: str, overrides: dict[str, Any] | None = None, file: str | None = None, *,
              field: str = "node_type", catalog: str | Path | None = None) -> NodeType:
    """Catalog entry ``name`` with ``overrides`` applied and re-validated.

    ``file``/``field`` name where the request came from, for the error message.
    """
    known = _load(str(catalog or CATALOG_FILE))
    if name not in known:
        raise UserError(f"unknown node type; known: {', '.join(sorted(known))}",
                        file=file, field=field, value=name)
    base = known[name]
    if not overrides:
        return base
    prefix = field.rsplit(".", 1)[0] + ".overrides" if "." in field else "overrides"
    try:
        overrides = renamed_node_fields(overrides, prefix)
    except UserError as err:
        raise err.with_file(file) if file else err
    for key in overrides:
        if key not in NodeType.model_fields:
            raise UserError(f"not a node-type field; fields: {', '.join(NodeType.model_fields)}",
                            file=file, field=f"{prefix}.{key}", value=overrides[key])
    try:
        return NodeType.model_validate({**base.model_dump(), **overrides})
    except ValidationError as exc:
        raise user_error_from_validation(exc, file, prefix=prefix) from None
