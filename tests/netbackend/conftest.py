"""Shared fixtures for network-backend tests; makes ``conformance`` importable from any test file here."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from conformance import dumbbell, leaf_spine, star  # noqa: E402


@pytest.fixture
def star4():
    return star(4)


@pytest.fixture
def dumbbell2():
    return dumbbell(2)


@pytest.fixture
def clos_2x2():
    """2 leaves x 2 spines x 2 hosts per leaf."""
    return leaf_spine(2, 2, 2)
