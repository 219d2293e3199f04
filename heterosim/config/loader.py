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


_PATH_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\[\d+\])*(\.[A-Za-z_][A-Za-z0-9_-]*(\[\d+\])*)*")


def set_path(data: dict, dotted: str, value: Any, *, file: str | None = None) -> None:
    """Apply one override ``a.b[2].c = value`` to nested dicts/lists."""
    if not isinstance(dotted, str) or not _PATH_RE.fullmatch(dotted):
        raise ConfigError("not a field path (like parallelism.tp or cluster.groups[0].num_nodes)",
                          file=file, field="--set", value=dotted)
    tokens = re.findall(r"[^.\[\]]+|\[\d+\]", dotted)
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


def _ref(base: Path, value: Any, file: str, field: str) -> Path:
    """A ``file:``/``hf_config:`` reference: a non-empty string naming an existing regular file."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("must be a file path (a string)", file=file, field=field, value=value)
    path = (base / value).resolve()
    if not path.is_file():
        why = "is a directory" if path.is_dir() else ("not a regular file" if path.exists() else "no such file")
        raise ConfigError(f"cannot read {path} ({why})", file=file, field=field, value=value)
    return path


def _zoo_name(value: Any, file: str, field: str) -> str:
    if not isinstance(value, str):
        raise ConfigError("must be a zoo model name (a string)", file=file, field=field, value=value)
    return value


def _resolve_refs(data: dict, base: Path, file: str) -> dict:
    """Inline ``model: <zoo name>``, ``model: {hf_config: ...}`` and ``{file: ...}`` references."""
    from heterosim.zoo import load_hf_config, zoo_model

    model = data.get("model")
    if isinstance(model, str):
        data["model"] = zoo_model(model, file=file)
    elif isinstance(model, dict) and "zoo" in model:
        extra = {k: v for k, v in model.items() if k != "zoo"}
        data["model"] = {**zoo_model(_zoo_name(model["zoo"], file, "model.zoo"), file=file), **extra}
    elif isinstance(model, dict) and "hf_config" in model:
        extra = {k: v for k, v in model.items() if k != "hf_config"}
        data["model"] = {**load_hf_config(_ref(base, model["hf_config"], file, "model.hf_config")), **extra}
    system_ref = data.pop("system", None)
    if system_ref is not None:
        if not isinstance(system_ref, dict) or set(system_ref) != {"file"}:
            raise ConfigError("must be {file: path}", file=file, field="system", value=system_ref)
        sys_path = _ref(base, system_ref["file"], file, "system.file")
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
            sub = load_yaml(_ref(base, ref["file"], file, f"{key}.file"))
            data[key] = sub.get(key, sub) if isinstance(sub, dict) else sub
    _resolve_background_cdf(data, base)
    return data


def _resolve_background_cdf(data: dict, base: Path) -> None:
    """A background CDF file is relative to the scenario's folder (like every other reference)."""
    from netbackend.background import BUILTIN_CDFS

    bg = (data.get("network") or {}).get("background") if isinstance(data.get("network"), dict) else None
    if isinstance(bg, dict) and isinstance(bg.get("cdf"), str) and bg["cdf"] not in BUILTIN_CDFS \
            and bg["cdf"].strip() and not Path(bg["cdf"]).is_absolute():
        bg["cdf"] = str((base / bg["cdf"]).resolve())


_REF_KEYS = ("model", "system", "cluster", "fabric")


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None):
    """Read, resolve references, apply ``--set`` overrides, validate."""
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
    return _validate_scenario(data, file)


def _validate_scenario(data: dict, file: str):
    """The framework preset (``training.framework``) as defaults where the data gives no value, then
    validation; the scenario records its source file and the fields its preset set."""
    from heterosim.config.frameworks import apply_framework
    from heterosim.config.scenario import Scenario

    applied = apply_framework(data, file=file)
    scenario = validate_model(Scenario, data, file=file)
    scenario._source_file = file  # type: ignore[attr-defined]
    scenario._framework_fields = applied  # type: ignore[attr-defined]
    return scenario


def scenario_from_dict(data: dict, *, file: str = "<dict>", base: Path | None = None,
                       overrides: list[str] | dict[str, Any] | None = None):
    """Validate a scenario given as a dict (references resolved against ``base``), with overrides."""
    items = _iter_overrides(overrides, file)
    data = copy.deepcopy(data)
    for key, value in items:
        if key in _REF_KEYS:
            set_path(data, key, value, file=file)
    data = _resolve_refs(data, base or Path.cwd(), file)
    for key, value in items:
        if key not in _REF_KEYS:
            set_path(data, key, value, file=file)
    return _validate_scenario(data, file)


def _iter_overrides(overrides, file):
    if not overrides:
        return []
    if isinstance(overrides, dict):
        return list(overrides.items())
    if isinstance(overrides, str):
        overrides = [overrides]
    out = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError("override must look like path=value", file="--set", value=item)
        key, text = item.split("=", 1)
        key = key.strip()
        out.append((key, parse_scalar(text, ConfigError, field=key)))
    return out


def scenario_json_schema() -> str:
    from heterosim.config.scenario import Scenario

    return json.dumps(Scenario.model_json_schema(), indent=2)
