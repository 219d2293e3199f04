"""One error type for every user mistake (the base lives in the lowest layer, so the CLI can print one line and exit 2.

A traceback tells a user nothing about which YAML line to fix; a message of the
form ``file: field.path = value: reason`` does.
"""
from __future__ import annotations

from typing import Any


class UserError(Exception):
    """A user-facing error: bad input, an impossible plan, a stuck simulation."""

    exit_code = 2

    def __init__(self, reason: str, *, file: str | None = None, field: str | None = None,
                 value: Any = ..., ) -> None:
        self.reason = reason
        self.file = file
        self.field = field
        self.value = value
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = []
        if self.file:
            parts.append(str(self.file))
        if self.field:
            loc = self.field if self.value is ... else f"{self.field} = {_short(self.value)}"
            parts.append(loc)
        elif self.value is not ...:
            parts.append(f"value {_short(self.value)}")
        parts.append(self.reason)
        return ": ".join(parts).replace("\n", " ")

    def with_file(self, file: str) -> "UserError":
        """Attach the file an error came from, if nothing closer was known."""
        if not self.file:
            self.file = file
            self.args = (self.one_line(),)
        return self


class RenamedFieldWarning(FutureWarning):
    """A config field given under its old name: read for one more release, with this warning (one line on
    the CLI: ``heterosim/cli.py`` formats warnings so)."""


class NetworkError(UserError):
    """A fabric that cannot be built or a network run that cannot finish (e.g. PFC deadlock)."""


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters in the middle, so both ends show: a long path keeps its
    file name (the part a user needs), a long list its first and last items."""
    text = repr(value)
    if len(text) <= limit:
        return text
    head = (limit - 3) // 2
    return text[:head] + "..." + text[len(text) - (limit - 3 - head):]
