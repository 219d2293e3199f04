"""Where compiled parts (the ns-3 module, the flow backend's rate engine) are cached between runs."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``HETEROSIM_CACHE_DIR``, else ``$XDG_CACHE_HOME/heterosim``, else ``~/.cache/heterosim``."""
    base = os.environ.get("HETEROSIM_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "heterosim"
