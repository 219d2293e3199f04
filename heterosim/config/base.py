"""Shared pydantic base: unknown fields are errors, assignments re-validate, numbers are finite and
never booleans, and bounded fields say their allowed range.

One definition for every layer (it lives in the lowest one, ``hscommon.bounds``).
"""
from hscommon.bounds import Bounded, BoundedModel as Strict

__all__ = ["Strict", "Bounded"]
