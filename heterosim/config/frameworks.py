"""Framework presets: ``training.framework: megatron-core`` instead of knowing HeteroSim's knobs.

A preset (``frameworks.yaml`` beside this module, every value cited there) is a set of scenario fields
with the value the framework uses. The loader applies it to the scenario's data before validation, as
defaults: a field the user gave (in the file, a cluster job or ``--set``) keeps the user's value. What
the preset set is recorded on the scenario (``framework_fields``) and reported in summary.json's
``framework`` section. Without ``training.framework`` nothing is applied (today's behaviour).

A preset for something HeteroSim cannot express (a ``refuse`` entry in the data file; none today) refuses with one line naming the
field that cannot hold it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from heterosim.errors import ConfigError

DATA_FILE = Path(__file__).with_name("frameworks.yaml")
FIELD = "training.framework"


@dataclass(frozen=True)
class FieldRule:
    """One preset value: fixed (``value``) or chosen by another scenario field (``by``/``cases``)."""

    path: str
    source: str
    value: Any = None
    by: str | None = None
    cases: tuple[tuple[Any, Any], ...] = ()
    otherwise: Any = None
    note: str | None = None

    def resolve(self, data: dict) -> Any:
        if self.by is None:
            return self.value
        key = lookup(data, self.by)
        for k, v in self.cases:
            if k == key:
                return v
        return self.otherwise


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    fields: tuple[FieldRule, ...] = ()
    refuse_field: str | None = None
    refuse_reason: str | None = None


def lookup(data: dict, path: str) -> Any:
    """The value of ``path`` in the scenario data as given, else the model's default."""
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return model_default(path)
        node = node[part]
    return node


def _field_info(path: str):
    """pydantic FieldInfo of a dotted Scenario path (``training.precision``), or None."""
    from pydantic import BaseModel

    from heterosim.config.scenario import Scenario

    cls: Any = Scenario
    info = None
    for part in path.split("."):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or part not in cls.model_fields:
            return None
        info = cls.model_fields[part]
        ann = info.annotation
        inner = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
        cls = inner[0] if inner else ann
    return info


def model_default(path: str) -> Any:
    info = _field_info(path)
    return None if info is None else info.get_default(call_default_factory=True)


@lru_cache(maxsize=1)
def presets() -> dict[str, Preset]:
    """The presets of ``frameworks.yaml``, checked: every field names a scenario field and cites a source."""
    from topologies._util import read_yaml

    raw = read_yaml(DATA_FILE, ConfigError)
    file = str(DATA_FILE)
    if not isinstance(raw, dict) or not isinstance(raw.get("presets"), dict):
        raise ConfigError("must hold a 'presets' mapping", file=file)
    out = {}
    for name, spec in raw["presets"].items():
        where = f"presets.{name}"
        if not isinstance(spec, dict):
            raise ConfigError("must be a mapping", file=file, field=where)
        refuse = spec.get("refuse")
        if refuse is not None:
            if set(refuse) != {"field", "reason"} or _field_info(refuse["field"]) is None:
                raise ConfigError("refuse needs field (a scenario field) and reason", file=file, field=f"{where}.refuse")
            out[name] = Preset(name, str(spec.get("description", "")), refuse_field=refuse["field"],
                               refuse_reason=" ".join(str(refuse["reason"]).split()))
            continue
        rules = []
        for path, rule in (spec.get("fields") or {}).items():
            at = f"{where}.fields.{path}"
            if _field_info(path) is None:
                raise ConfigError("not a scenario field", file=file, field=at)
            if not isinstance(rule, dict) or not str(rule.get("source", "")).strip():
                raise ConfigError("needs a source", file=file, field=at)
            known = {"value", "by", "cases", "otherwise", "source", "note"}
            if set(rule) - known or (("value" in rule) == ("by" in rule)):
                raise ConfigError("give value, or by + cases + otherwise (with source, note)", file=file, field=at)
            if "by" in rule and (_field_info(rule["by"]) is None or "otherwise" not in rule
                                 or not isinstance(rule.get("cases"), dict)):
                raise ConfigError("by must name a scenario field, with cases and otherwise", file=file, field=at)
            rules.append(FieldRule(path, " ".join(str(rule["source"]).split()), rule.get("value"), rule.get("by"),
                                   tuple((rule.get("cases") or {}).items()), rule.get("otherwise"),
                                   " ".join(str(rule["note"]).split()) if rule.get("note") else None))
        later = {r.path for r in rules}
        for r in rules:  # applied in file order: a rule may depend on a field an earlier rule set
            later.discard(r.path)
            if r.by in later or r.by == r.path:
                raise ConfigError("by must name a field the preset sets earlier or does not set", file=file,
                                  field=f"{where}.fields.{r.path}")
        out[name] = Preset(name, " ".join(str(spec.get("description", "")).split()), tuple(rules))
    return out


def get_preset(name: Any, *, file: str | None = None, field: str = FIELD) -> Preset:
    """The named preset, or a one-line error naming the field, the value and the known names (or why the
    preset cannot be expressed)."""
    known = presets()
    if not isinstance(name, str) or name not in known:
        raise ConfigError(f"unknown framework preset; known: {', '.join(known)}", file=file, field=field, value=name)
    preset = known[name]
    if preset.refuse_reason:
        raise ConfigError(f"cannot be expressed: {preset.refuse_reason}", file=file, field=field, value=name)
    return preset


def known_or_reason(name: Any) -> str | None:
    """None when ``name`` is None or a preset HeteroSim can express; else why not (the validator's message,
    for scenarios validated without the loader)."""
    if name is None:
        return None
    try:
        get_preset(name)
    except ConfigError as err:
        return err.reason
    return None


def _given(data: dict, path: str) -> bool:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def apply_framework(data: dict, *, file: str | None = None) -> dict[str, Any]:
    """Fill the preset named by ``training.framework`` into ``data`` (in place) where the user gave no
    value. Returns {field path: value set}; {} without a framework. A recorded workload (``workload``)
    brings its own model and parallelism: only the preset's training fields apply to it."""
    training = data.get("training")
    if not isinstance(training, dict) or training.get("framework") is None:
        return {}
    preset = get_preset(training["framework"], file=file)
    recorded = data.get("workload") is not None
    applied: dict[str, Any] = {}
    for rule in preset.fields:
        top = rule.path.split(".", 1)[0]
        if _given(data, rule.path) or (recorded and top in ("model", "parallelism")) or \
                (top == "model" and not isinstance(data.get("model"), dict)):
            continue
        value = copy.deepcopy(rule.resolve(data))
        node = data
        parts = rule.path.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part, {}), dict):
                break  # a malformed section: validation reports it
            node = node.setdefault(part, {})
        else:
            node[parts[-1]] = value
            applied[rule.path] = value
    return applied


def without_preset_values(data: dict, applied: dict[str, Any]) -> dict:
    """``data`` (a scenario dump) without the values its preset filled in, where they are unchanged:
    reloading it (with new overrides, perhaps another framework) re-applies the preset as defaults."""
    out = copy.deepcopy(data)
    for path, value in applied.items():
        parts = path.split(".")
        node: Any = out
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(parts[-1]) == value:
            del node[parts[-1]]
    return out


def preset_table() -> list[dict[str, Any]]:
    """One row per preset field (docs/framework-presets.md): preset, field, value (or rule), source, note."""
    rows = []
    for p in presets().values():
        if p.refuse_reason:
            rows.append({"preset": p.name, "field": p.refuse_field, "value": "refused", "source": p.refuse_reason,
                         "note": None})
            continue
        for r in p.fields:
            value = r.value if r.by is None else \
                "; ".join([f"{r.by}={k}: {v}" for k, v in r.cases] + [f"otherwise: {r.otherwise}"])
            rows.append({"preset": p.name, "field": r.path, "value": value, "source": r.source, "note": r.note})
    return rows


def markdown_table() -> str:
    """docs/framework-presets.md's table (``python -m heterosim.config.frameworks``)."""
    def cell(v: Any) -> str:
        text = str(v).lower() if isinstance(v, bool) else (f"{v:,}" if isinstance(v, int) else str(v))
        return text.replace("|", "\\|")

    lines = ["| preset | field | value | source |", "|---|---|---|---|"]
    for r in preset_table():
        src = r["source"] + (f" **Not modelled:** {r['note']}" if r["note"] else "")
        lines.append(f"| {r['preset']} | `{r['field']}` | {cell(r['value'])} | {cell(src)} |")
    return "\n".join(lines)


def markdown_matrix() -> str:
    """Field x preset at a glance (docs/framework-presets.md); conditional values in short form."""
    ps = [p for p in presets().values() if not p.refuse_reason]
    paths = list(dict.fromkeys(r.path for p in ps for r in p.fields))

    def short(r: FieldRule | None) -> str:
        if r is None:
            return "-"
        fmt = (lambda v: str(v).lower() if isinstance(v, bool) else (f"{v:,}" if isinstance(v, int) else str(v)))
        if r.by is None:
            return fmt(r.value)
        return ", ".join([f"{k}: {fmt(v)}" for k, v in r.cases] + [f"else {fmt(r.otherwise)}"]) + \
            f" (by `{r.by.split('.')[-1]}`)"

    lines = ["| field | " + " | ".join(p.name for p in ps) + " |", "|---" * (len(ps) + 1) + "|"]
    for path in paths:
        cells = [short(next((r for r in p.fields if r.path == path), None)) for p in ps]
        lines.append(f"| `{path}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_matrix() + "\n\n" + markdown_table())
