"""Shared pydantic base: unknown fields are errors, assignments re-validate."""
from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)
