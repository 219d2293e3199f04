"""YAML loading and one-line pydantic errors, shared by every config file reader.

They live here, in the lowest layer that reads YAML (``topologies`` may not
import ``heterosim``); ``heterosim.config.loader`` uses them too.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from netbackend.errors import UserError


class _Loader(yaml.SafeLoader):
    pass


# YAML 1.1 reads "1e9" as a string; accept it as a number like the scenario loader does.
_FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


def parse_scalar(text: str) -> Any:
    """Parse a ``--set path=value`` value the way a YAML file would."""
    return yaml.load(text, Loader=_Loader)


def read_yaml(path: str | Path, error_cls: type[UserError] = UserError) -> Any:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise error_cls(f"cannot read file ({exc.strerror})", file=str(path)) from None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "?"
        raise error_cls(f"invalid YAML at {where}: {getattr(exc, 'problem', exc)}", file=str(path)) from None


_FABRIC_TAGS = {"leaf_spine", "fat_tree", "rail_optimized", "links"}


def user_error_from_validation(exc: ValidationError, file: str | None, prefix: str = "",
                               error_cls: type[UserError] = UserError) -> UserError:
    """First pydantic error as ``file: field.path = value: reason``."""
    err = exc.errors()[0]
    parts: list[str] = []
    for p in err["loc"]:
        p = str(p)
        if p.startswith("function-") or (p in _FABRIC_TAGS and (parts[-1:] == ["fabric"] or prefix == "fabric"
                                                                and not parts)):
            continue  # discriminator tag pydantic inserts after a union field
        if p.isdigit() and parts:
            parts[-1] += f"[{p}]"
        else:
            parts.append(p)
    field = ".".join(([prefix] if prefix else []) + parts) or (prefix or None)
    msg = err["msg"].removeprefix("Value error, ")
    value = err.get("input", ...)
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif err["type"] == "missing":
        value, msg = ..., "required field is missing"
    if isinstance(value, (dict, list)) and err["type"] != "extra_forbidden":
        value = ...
    return error_cls(msg, file=file, field=field, value=value)
