"""YAML -> validated Scenario, with errors as one line: file, field path, value.

Every value goes through pydantic; the YAML loader (``topologies._util``, shared
with topology files) also reads ``1e9`` as a number (plain PyYAML follows YAML
1.1, where it is a string).
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from heterosim.errors import ConfigError
from topologies._util import parse_scalar, read_yaml, user_error_from_validation


def load_yaml(path: str | Path) -> Any:
    return read_yaml(path, ConfigError)


def set_path(data: dict, dotted: str, value: Any, *, file: str | None = None) -> None:
    """Apply one override ``a.b[2].c = value`` to nested dicts/lists."""
    tokens = re.findall(r"[^.\[\]]+|\[\d+\]", dotted)
    if not tokens:
        raise ConfigError("empty override path", file=file, field=dotted)
    node: Any = data
    for i, tok in enumerate(tokens):
        last = i == len(tokens) - 1
        if tok.startswith("["):
            idx = int(tok[1:-1])
            if not isinstance(node, list) or idx >= len(node):
                raise ConfigError("index out of range", file=file, field=dotted, value=value)
            if last:
                node[idx] = value
            else:
                node = node[idx]
        else:
            if not isinstance(node, dict):
                raise ConfigError("path does not name a mapping", file=file, field=dotted, value=value)
            if last:
                node[tok] = value
            else:
                node = node.setdefault(tok, {})


def format_validation_error(exc: ValidationError, file: str | None, prefix: str = "") -> ConfigError:
    return user_error_from_validation(exc, file, prefix, ConfigError)


def validate_model(cls: type[BaseModel], data: Any, *, file: str | None = None, prefix: str = "") -> Any:
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise format_validation_error(exc, file, prefix) from None


def _resolve_refs(data: dict, base: Path, file: str) -> dict:
    """Inline ``model: <zoo name>``, ``model: {hf_config: ...}`` and ``{file: ...}`` references."""
    from heterosim.zoo import load_hf_config, zoo_model

    model = data.get("model")
    if isinstance(model, str):
        data["model"] = zoo_model(model, file=file)
    elif isinstance(model, dict) and "zoo" in model:
        extra = {k: v for k, v in model.items() if k != "zoo"}
        data["model"] = {**zoo_model(model["zoo"], file=file), **extra}
    elif isinstance(model, dict) and "hf_config" in model:
        extra = {k: v for k, v in model.items() if k != "hf_config"}
        data["model"] = {**load_hf_config(base / model["hf_config"]), **extra}
    system_ref = data.pop("system", None)
    if system_ref is not None:
        if not isinstance(system_ref, dict) or set(system_ref) - {"file"}:
            raise ConfigError("must be {file: path}", file=file, field="system", value=system_ref)
        sys_path = (base / system_ref["file"]).resolve()
        sys_data = load_yaml(sys_path)
        if not isinstance(sys_data, dict):
            raise ConfigError("topology file must be a mapping", file=str(sys_path))
        from topologies.config import SystemConfig
        validate_model(SystemConfig, sys_data, file=str(sys_path))
        data.setdefault("cluster", sys_data.get("cluster"))
        if "fabric" in sys_data:
            data.setdefault("fabric", sys_data["fabric"])
    for key in ("cluster", "fabric"):
        ref = data.get(key)
        if isinstance(ref, dict) and set(ref) == {"file"}:
            sub = load_yaml((base / ref["file"]).resolve())
            data[key] = sub.get(key, sub) if isinstance(sub, dict) else sub
    return data


_REF_KEYS = ("model", "system", "cluster", "fabric")


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None):
    """Read, resolve references, apply ``--set`` overrides, validate."""
    from heterosim.config.scenario import Scenario

    path = Path(path)
    file = str(path)
    raw = load_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError("a scenario must be a YAML mapping", file=file)
    # a whole reference (``--set model=llama2-7b``, ``--set system={file: ...}``) replaces the
    # file's before references are resolved; field overrides apply to the resolved values
    items = _iter_overrides(overrides, file)
    data = copy.deepcopy(raw)
    for key, value in items:
        if key in _REF_KEYS:
            set_path(data, key, value, file=file)
    data = _resolve_refs(data, path.parent, file)
    for key, value in items:
        if key not in _REF_KEYS:
            set_path(data, key, value, file=file)
    scenario = validate_model(Scenario, data, file=file)
    scenario._source_file = file  # type: ignore[attr-defined]
    return scenario


def scenario_from_dict(data: dict, *, file: str = "<dict>", base: Path | None = None):
    from heterosim.config.scenario import Scenario

    data = _resolve_refs(copy.deepcopy(data), base or Path.cwd(), file)
    scenario = validate_model(Scenario, data, file=file)
    scenario._source_file = file  # type: ignore[attr-defined]
    return scenario


def _iter_overrides(overrides, file):
    if not overrides:
        return []
    if isinstance(overrides, dict):
        return list(overrides.items())
    out = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError("override must look like path=value", file="--set", value=item)
        key, text = item.split("=", 1)
        out.append((key.strip(), parse_scalar(text)))
    return out


def scenario_json_schema() -> str:
    from heterosim.config.scenario import Scenario

    return json.dumps(Scenario.model_json_schema(), indent=2)
