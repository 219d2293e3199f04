"""The model zoo: architectures as data (``models/*.yaml``), plus HuggingFace import."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from heterosim.errors import ConfigError

MODELS_DIR = Path(__file__).parent / "models"


@lru_cache(maxsize=None)
def _catalog() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for path in sorted(MODELS_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        for name, fields in data.items():
            out[name] = {"name": name, **fields}
    return out


def zoo_names() -> list[str]:
    return sorted(_catalog())


def zoo_model(name: str, *, file: str | None = None) -> dict:
    """Model fields for a zoo name, as a plain dict (validated by the caller)."""
    cat = _catalog()
    if name not in cat:
        raise ConfigError(f"unknown zoo model (known: {', '.join(sorted(cat))})", file=file, field="model", value=name)
    return dict(cat[name])


def load_hf_config(path) -> dict:
    from heterosim.zoo.hf_import import hf_config_to_model

    return hf_config_to_model(path)
