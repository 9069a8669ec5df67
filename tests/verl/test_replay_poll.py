"""``skillduet.replay_poll_interval_s``: verl's replay buffer polls the rollout every 2 s (a constructor default,
not a config key); the adapter sets it when asked, and refuses a bad value before any work."""

from __future__ import annotations

import pytest

from skillduet_plugin.core.settings import ConfigError
from skillduet_plugin.integrations.verl.settings import parse_settings


def test_poll_interval_is_parsed_and_defaults_to_verls_own():
    assert parse_settings({}).replay_poll_interval_s is None
    assert parse_settings({"replay_poll_interval_s": 0.1}).replay_poll_interval_s == 0.1


@pytest.mark.parametrize("bad", [0, -1.0, "fast"])
def test_bad_poll_interval_is_refused_with_the_key(bad):
    with pytest.raises(ConfigError, match="skillduet.replay_poll_interval_s"):
        parse_settings({"replay_poll_interval_s": bad})


def test_trainer_sets_the_buffer_interval(monkeypatch):
    pytest.importorskip("verl")
    from skillduet_plugin.integrations.verl import trainer as mod

    class Buffer:
        poll_interval = 2.0

    class Base:
        def _build_replay_buffer(self):
            return Buffer()

    # only the override under test: the base class's builder is replaced by one returning a plain buffer
    monkeypatch.setattr(mod.SkillDuetTrainer.__mro__[1], "_build_replay_buffer", Base._build_replay_buffer,
                        raising=False)
    obj = object.__new__(mod.SkillDuetTrainer)
    obj.skillduet = parse_settings({"replay_poll_interval_s": 0.25})
    monkeypatch.setattr(mod, "watch_replay_buffer", lambda buffer, fn: buffer)
    assert obj._build_replay_buffer().poll_interval == 0.25
    obj.skillduet = parse_settings({})
    assert obj._build_replay_buffer().poll_interval == 2.0  # negative control: untouched without the key
