"""The strict pydantic base of every config model in every layer (the lowest module, imported by all)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown fields are errors, assignments re-validate."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
