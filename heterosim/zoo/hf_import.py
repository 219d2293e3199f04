"""HuggingFace ``config.json`` -> ModelConfig fields, so any published architecture can be simulated.

Dispatches on ``model_type``; each family lists the HF field names (with aliases, since GPT-2 style
configs say ``n_layer`` where LLaMA style ones say ``num_hidden_layers``) and its defaults.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from heterosim.errors import ConfigError

# ModelConfig field -> HF names, first present wins.
_ALIASES: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads",),
    "ffn_hidden_size": ("intermediate_size", "n_inner", "ffn_dim"),
    "vocab_size": ("vocab_size",),
    "max_seq_length": ("max_position_embeddings", "n_positions", "n_ctx"),
    "tie_embeddings": ("tie_word_embeddings",),
    "activation": ("hidden_act", "activation_function"),
    "num_experts": ("num_local_experts", "num_experts"),
    "moe_top_k": ("num_experts_per_tok",),
    "moe_ffn_hidden_size": ("moe_intermediate_size",),
    "head_dim": ("head_dim",),
    "hidden_dropout": ("resid_pdrop", "hidden_dropout", "hidden_dropout_prob"),
}


class _Family:
    def __init__(self, gated: bool, tie_default: bool, moe: bool = False, ffn_default_mult: int | None = None,
                 seq_default: int | None = None, dropout_default: float = 0.0) -> None:
        self.gated = gated
        """Gated FFN (SwiGLU-style: three matrices) whatever hidden_act says."""
        self.tie_default = tie_default
        """HF's default for tie_word_embeddings when the file omits it."""
        self.moe = moe
        self.ffn_default_mult = ffn_default_mult
        """GPT-2 / GPT-J: n_inner null means 4 x hidden."""
        self.seq_default = seq_default
        self.dropout_default = dropout_default
        """HF's default hidden-state dropout of the family's config class when the file omits it."""


_FAMILIES: dict[str, _Family] = {
    "llama": _Family(gated=True, tie_default=False, seq_default=2048),
    "mistral": _Family(gated=True, tie_default=False, seq_default=4096 * 32),
    "mixtral": _Family(gated=True, tie_default=False, moe=True, seq_default=4096 * 32),
    "qwen2": _Family(gated=True, tie_default=False, seq_default=32768),
    "qwen3": _Family(gated=True, tie_default=False, seq_default=32768),
    "qwen3_moe": _Family(gated=True, tie_default=False, moe=True, seq_default=32768),
    "gpt2": _Family(gated=False, tie_default=True, ffn_default_mult=4, seq_default=1024, dropout_default=0.1),
    "gpt_neox": _Family(gated=False, tie_default=False, seq_default=2048),
    "gptj": _Family(gated=False, tie_default=False, ffn_default_mult=4, seq_default=2048),
}

_GELU_LIKE = {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_accurate", "quick_gelu", "relu",
              "gelu_10"}
_GATED_ACTS = {"silu", "swish", "swiglu", "gelu", "gelu_pytorch_tanh", "gelu_new"}


def _read(path: str | Path) -> tuple[dict, str]:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    file = str(p)
    from topologies._util import read_text

    text = read_text(p, ConfigError, "HuggingFace config")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON at line {exc.lineno}: {exc.msg}", file=file) from None
    except RecursionError:
        raise ConfigError("invalid JSON: nested too deeply", file=file) from None
    except ValueError as exc:
        raise ConfigError(f"invalid JSON: {exc}", file=file) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object", file=file)
    return data, file


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a config may hold")


def _get(data: dict, field: str, file: str, *, required: bool = True) -> Any:
    for name in _ALIASES[field]:
        if data.get(name) is not None:
            return data[name]
    if required:
        raise ConfigError(f"missing required field (HF names: {' / '.join(_ALIASES[field])})", file=file,
                          field=_ALIASES[field][0])
    return None


def _int(data: dict, field: str, file: str, *, required: bool = True) -> int | None:
    val = _get(data, field, file, required=required)
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
        name = next(n for n in _ALIASES[field] if data.get(n) is not None)
        raise ConfigError("must be a positive integer", file=file, field=name, value=val)
    return val


def _default_name(data: dict, file: str) -> str:
    src = data.get("_name_or_path")
    if isinstance(src, str) and src.strip():
        return src.rstrip("/").split("/")[-1]
    p = Path(file)
    return p.parent.name if p.name == "config.json" and p.parent.name else p.stem


def hf_config_to_model(path: str | Path, name: str | None = None) -> dict:
    """ModelConfig fields (a validated plain dict) from a HuggingFace config.json (or its folder)."""
    data, file = _read(path)
    mtype = data.get("model_type")
    if not isinstance(mtype, str) or mtype not in _FAMILIES:
        raise ConfigError(f"unsupported model_type (supported: {', '.join(sorted(_FAMILIES))})", file=file,
                          field="model_type", value=mtype)
    fam = _FAMILIES[mtype]
    hidden = _int(data, "hidden_size", file)
    ffn = _int(data, "ffn_hidden_size", file, required=fam.ffn_default_mult is None)
    if ffn is None:
        ffn = fam.ffn_default_mult * hidden
    act_raw = _get(data, "activation", file, required=False)
    if act_raw is not None and not isinstance(act_raw, str):
        raise ConfigError("must be a string", file=file, field="hidden_act", value=act_raw)
    if fam.gated:
        if act_raw is not None and act_raw not in _GATED_ACTS:
            raise ConfigError(f"unsupported gated activation (supported: {', '.join(sorted(_GATED_ACTS))})",
                              file=file, field="hidden_act", value=act_raw)
        activation = "swiglu"
    else:
        if act_raw is not None and act_raw not in _GELU_LIKE:
            raise ConfigError(f"unsupported activation (supported: {', '.join(sorted(_GELU_LIKE))})", file=file,
                              field="activation_function" if "activation_function" in data else "hidden_act",
                              value=act_raw)
        activation = "gelu"  # relu costs the same as gelu: two FFN matrices
    tie = data.get("tie_word_embeddings", fam.tie_default)
    if not isinstance(tie, bool):
        raise ConfigError("must be true or false", file=file, field="tie_word_embeddings", value=tie)
    seq = _int(data, "max_seq_length", file, required=fam.seq_default is None) or fam.seq_default
    out: dict[str, Any] = {
        "name": name or _default_name(data, file),
        "num_layers": _int(data, "num_layers", file),
        "hidden_size": hidden,
        "num_attention_heads": _int(data, "num_attention_heads", file),
        "ffn_hidden_size": ffn,
        "vocab_size": _int(data, "vocab_size", file),
        "max_seq_length": seq,
        "activation": activation,
        "tie_embeddings": tie,
    }
    kv = _int(data, "num_kv_heads", file, required=False)
    if kv is not None and kv != out["num_attention_heads"]:
        out["num_kv_heads"] = kv
    head = _int(data, "head_dim", file, required=False)
    if head is not None and head * out["num_attention_heads"] != hidden:
        out["head_dim"] = head  # Qwen3, Gemma: queries wider (or narrower) than the hidden size
    drop = next((data[k] for k in _ALIASES["hidden_dropout"] if k in data), fam.dropout_default)
    if not isinstance(drop, (int, float)) or isinstance(drop, bool):
        raise ConfigError("must be a number", file=file, field="resid_pdrop / hidden_dropout", value=drop)
    out["hidden_dropout"] = float(drop)
    if fam.moe:
        out["num_experts"] = _int(data, "num_experts", file)
        out["moe_top_k"] = _int(data, "moe_top_k", file)
        out["moe_ffn_hidden_size"] = _int(data, "moe_ffn_hidden_size", file, required=False) or ffn
    src = data.get("_name_or_path")
    out["source"] = f"HuggingFace config.json ({src if isinstance(src, str) and src else file})"
    _validate(out, file)
    return out


def _validate(fields: dict, file: str) -> None:
    from heterosim.config.model import ModelConfig

    try:
        ModelConfig(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err.get("loc", ())) or None
        value = fields.get(loc, ...) if loc else ...
        raise ConfigError(err.get("msg", "invalid").removeprefix("Value error, "), file=file, field=loc,
                          value=value) from None


def hf_to_zoo_yaml(path: str | Path, name: str) -> str:
    """A zoo YAML snippet (``name: {fields}``) for ``heterosim import-hf``; paste into zoo/models/."""
    fields = hf_config_to_model(path, name=name)
    fields.pop("name")
    return yaml.safe_dump({name: fields}, sort_keys=False, default_flow_style=False)
