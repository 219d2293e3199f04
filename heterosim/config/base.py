"""Shared pydantic base: unknown fields are errors, assignments re-validate.

One definition for every layer (it lives in the lowest one, ``netbackend.config``).
"""
from netbackend.config import StrictModel as Strict

__all__ = ["Strict"]
