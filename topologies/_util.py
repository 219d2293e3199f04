"""YAML loading and one-line pydantic errors, shared by every config file reader.

They live here, in the lowest layer that reads YAML (``topologies`` may not
import ``heterosim``); ``heterosim.config.loader`` uses them too.
"""
from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hscommon.errors import UserError


MAX_FILE_BYTES = 16 << 20
"""Largest config file read (the biggest shipped one is ~3 KB; a topology listing 100k links is ~5 MB)."""
MAX_ALIASES = 100
"""``*alias`` references per document: enough for hand-written sharing, too few for an alias bomb."""
MAX_EXPANDED_NODES = 1_000_000
"""YAML nodes after expanding aliases (what pydantic would walk); an alias bomb expands to billions."""
MAX_DEPTH = 64
"""Nesting depth of mappings/lists (scenarios nest ~5 deep; Python's own recursion ends near 300)."""


class _Refused(yaml.YAMLError):
    def __init__(self, problem: str, mark=None) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, alias bombs and deep nesting, with the line."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused(f"more than {MAX_ALIASES} aliases (*name)", self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None and self._aliases:
            _check_expansion(node)
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                except TypeError:
                    raise _Refused("a mapping key must be a plain value", key_node.start_mark) from None
                if dup:
                    raise _Refused(f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_expansion(root) -> None:
    """Count nodes as if every alias were copied (memoised per node, so it never expands anything)."""
    sizes: dict[int, int] = {}
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = []
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [x for kv in node.value for x in kv]
        if done:
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[id(node)] > MAX_EXPANDED_NODES:
                raise _Refused(f"aliases expand to more than {MAX_EXPANDED_NODES:,} values", node.start_mark)
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)


# YAML 1.1 reads "1e9" as a string; accept it as a number like the scenario loader does.
_FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


def _yaml_error(exc: Exception, what: str) -> str:
    if isinstance(exc, RecursionError):
        return f"invalid {what}: nested too deeply"
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
    return f"invalid {what}{where}: {problem}"


def parse_scalar(text: str, error_cls: type[UserError] = UserError, *, field: str | None = None) -> Any:
    """Parse a ``--set path=value`` value the way a YAML file would (same limits)."""
    try:
        return yaml.load(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError) as exc:
        raise error_cls(_yaml_error(exc, "YAML value"), file="--set", field=field, value=text) from None


def read_text(path: str | Path, error_cls: type[UserError] = UserError, what: str = "file") -> str:
    """A config file's text: a regular file, at most MAX_FILE_BYTES, valid UTF-8 (else one-line errors)."""
    path = Path(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise error_cls(f"cannot read {what}: {kind}", file=str(path))
        if st.st_size > MAX_FILE_BYTES:
            raise error_cls(f"{what} is {st.st_size:,} bytes; at most {MAX_FILE_BYTES:,}", file=str(path))
        data = path.read_bytes()
    except OSError as exc:
        raise error_cls(f"cannot read {what} ({exc.strerror})", file=str(path)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise error_cls(f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}", file=str(path)) from None


def read_yaml(path: str | Path, error_cls: type[UserError] = UserError) -> Any:
    path = Path(path)
    text = read_text(path, error_cls)
    try:
        return yaml.load(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError) as exc:
        raise error_cls(_yaml_error(exc, "YAML"), file=str(path)) from None


_FABRIC_TAGS = {"leaf_spine", "fat_tree", "rail_optimized", "links"}
_UNION_TAGS = {"float", "int", "str", "bool", "none", "is-instance"}
"""Member names pydantic inserts in a location after a union field (``overrides.nic_gbps.float``)."""


def user_error_from_validation(exc: ValidationError, file: str | None, prefix: str = "",
                               error_cls: type[UserError] = UserError) -> UserError:
    """First pydantic error as ``file: field.path = value: reason``."""
    err = exc.errors()[0]
    parts: list[str] = []
    for p in err["loc"]:
        p = str(p)
        tag = p in _FABRIC_TAGS and (parts[-1:] == ["fabric"] or prefix == "fabric" and not parts)
        if p in _UNION_TAGS or p.startswith(("function-", "constrained-", "list[", "dict[")) or tag:
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
