"""Fixtures of the skill-lifecycle tests."""

from __future__ import annotations

import pytest

from skills_fakes import FakeBackend


@pytest.fixture()
def fake_backend() -> FakeBackend:
    return FakeBackend()
