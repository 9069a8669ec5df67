"""The warm start's reading design: stand-in skills name real receptacles of the same room (never where the target
was) and the expert goes there first; the design enters the warm-start cache key; a bad design is a config error."""

from __future__ import annotations

import random
import re

import pytest

from skillduet_plugin.core.settings import ConfigError
from skillduet_plugin.runs.config import load_run_config
from skillduet_plugin.runs.trl_runner import warm_start_settings
from skillduet_plugin.warmstart.cache import cache_key, cache_settings
from skillduet_plugin.warmstart.episodes import ExpertRecord
from skillduet_plugin.warmstart.reading import round_robin, swapped


def test_swapped_exchanges_whole_names_only():
    rec = ExpertRecord(task_id="t", scope="pick", task="put a mug in desk", won=True,
                       observations=["You see a cabinet 2, a cabinet 21 and a drawer 1.", "The cabinet 2 is closed."],
                       admissible=[["go to cabinet 2", "go to cabinet 21", "go to drawer 1"], ["open cabinet 2"]],
                       actions=["go to cabinet 2", "take mug 1 from cabinet 2"])
    out = swapped(rec, {"cabinet 2": "drawer 1", "drawer 1": "cabinet 2"})
    assert out.actions == ["go to drawer 1", "take mug 1 from drawer 1"]
    assert out.observations[0] == "You see a drawer 1, a cabinet 21 and a cabinet 2."
    assert out.admissible[0] == ["go to drawer 1", "go to cabinet 21", "go to cabinet 2"]
    assert rec.actions[0] == "go to cabinet 2"  # the record itself is left as it was
    assert swapped(rec, {}) is rec


def test_round_robin_interleaves_task_types():
    tasks = ["a1", "a2", "a3", "b1", "c1", "c2"]
    assert round_robin(tasks, lambda t: t[0]) == ["a1", "b1", "c1", "a2", "c2", "a3"]


@pytest.fixture(scope="module")
def reading_games(tmp_path_factory):
    pytest.importorskip("alfworld")
    from skillduet_plugin.envs import make
    from skillduet_plugin.envs.alfworld.generator import generate_games

    root = tmp_path_factory.mktemp("reading_games")
    generate_games(root, "clone", n_per_type=2, seed=3, task_types=("pick", "look", "heat"))
    env = make("alfworld", data_dir=root, split="clone")
    env.kwargs = {"data_dir": str(root), "split": "clone"}
    yield env
    env.close()


def _blanked(text: str, room: set[str]) -> str:
    """``text`` with every receptacle of the room, named (``sidetable 1``) or by its type (``the sidetable``),
    blanked."""
    types = sorted({r.split()[0] for r in room}, key=len, reverse=True)
    return re.sub(r"\b(%s)( \d+)?\b" % "|".join(types), "<receptacle>", text)


def test_stand_in_skills_name_other_receptacles_of_the_room_and_the_expert_goes_there_first(reading_games):
    from skillduet_plugin.envs.alfworld.expert import _plausible_holders, hint_of, task_params
    from skillduet_plugin.warmstart.reading import reading_episodes

    env = reading_games
    episodes = reading_episodes(env, list(env.tasks), "alfworld", max_turns=12, counterfactuals=3)
    kinds = [e.kind for e in episodes]
    assert kinds.count("none") == len(env.tasks) and kinds.count("true") == len(env.tasks)
    assert kinds.count("standin") >= len(env.tasks)  # most rooms have several receptacles that could hold it
    truth: dict[str, str] = {}
    for e in episodes:
        rec, params = e.record, task_params(e.record.task_id)
        room = {a[len("go to "):] for a in rec.admissible[0] if a.startswith("go to ")}
        if e.kind == "none":
            assert e.plan is None
            continue
        first = e.plan.text.splitlines()[0]
        named = re.search(r"was in ([a-z]+ \d+)", first).group(1)
        assert named in room  # a real receptacle of this game's room
        first_go = next(a for a in rec.actions if a.startswith("go to "))
        assert first_go == f"go to {named}" or rec.actions[0].startswith("take ")  # the expert goes there first
        if e.kind == "true":
            truth[rec.task_id] = named
            assert hint_of(rec.actions).places[0] == named  # and takes the target there
        else:
            assert named != truth[rec.task_id]  # never where the target was
            assert named.split()[0] in _plausible_holders(params.obj) and named.split()[0] != params.recep
            assert f"take {params.obj}" in " ".join(rec.actions) or not rec.won
    # the true-skill and stand-in texts of a game are one plan with other receptacles named (the stand-in is the
    # plan of the game with receptacles swapped): the same words once the room's receptacles are blanked
    true_text = {e.record.task_id: e.plan.text for e in episodes if e.kind == "true"}
    standins = [e for e in episodes if e.kind == "standin"]
    assert standins and {e.record.task_id for e in standins} <= set(true_text)
    for e in standins:
        tid = e.record.task_id
        assert e.plan.text != true_text[tid]
        room = {a[len("go to "):] for a in e.record.admissible[0] if a.startswith("go to ")}
        assert _blanked(e.plan.text, room) == _blanked(true_text[tid], room)


def test_the_design_and_its_settings_enter_the_warm_start_key(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    kw = warm_start_settings(load_run_config(None, []))
    assert kw["design"] == "search" and kw["reading"] is None

    def key(*overrides: str) -> str:
        return cache_key(cache_settings(tmp_path, **warm_start_settings(load_run_config(None, list(overrides)))))

    search, reading = key(), key("warm_start.design=reading")
    assert search != reading
    assert reading != key("warm_start.design=reading", "warm_start.clone_games=100")
    assert reading != key("warm_start.design=reading", "warm_start.counterfactuals=1")
    assert reading != key("warm_start.design=reading", "warm_start.global_episodes=1")
    # negative controls: the worker count never enters it, and the reading settings do not touch a search key
    assert reading == key("warm_start.design=reading", "warm_start.workers=2")
    assert search == key("warm_start.clone_games=100")


@pytest.mark.parametrize("override, needle", [
    ("warm_start.design=mirror", "warm_start.design='mirror' is invalid: allowed values are search, reading"),
    ("warm_start.counterfactuals=-1", "warm_start.counterfactuals=-1 is invalid"),
])
def test_bad_reading_settings_are_one_line_config_errors(override, needle):
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [override])
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_the_reading_design_needs_an_expert_that_acts_on_a_skill():
    with pytest.raises(ConfigError, match=r"warm_start.design='reading' is invalid: env 'webshop' has no expert"):
        load_run_config(None, ["env=webshop", "warm_start.design=reading"])
    assert load_run_config(None, ["warm_start.design=reading"]).warm_start.design == "reading"
    with pytest.raises(ConfigError, match=r"warm_start.games=0 is invalid: design=search clones training games"):
        load_run_config(None, ["warm_start.games=0"])
    assert load_run_config(None, ["warm_start.design=reading", "warm_start.games=0"]).warm_start.games == 0


def test_stand_ins_are_seeded():
    from skillduet_plugin.envs.alfworld.expert import standins

    pytest.importorskip("alfworld")
    task = "clone/pick_and_place_simple-Mug-None-Desk-1/trial_G000000_000000"
    actions = ["go to cabinet 2", "take mug 1 from cabinet 2", "go to desk 1", "move mug 1 to desk 1"]
    adm = [f"go to {r}" for r in ("cabinet 1", "cabinet 2", "cabinet 3", "desk 1", "drawer 1", "shelf 1")]
    a = standins(task, actions, adm, 3, random.Random(0))
    assert a == standins(task, actions, adm, 3, random.Random(0)) and len(a) == 3
    for swap in a:
        assert swap["cabinet 2"] != "cabinet 2" and swap[swap["cabinet 2"]] == "cabinet 2"
        assert swap["cabinet 2"] != "desk 1"  # never the goal's class


def test_worker_processes_play_the_same_episodes_in_the_same_order(reading_games):
    """``warm_start.workers`` is a speed setting: the reading design's games played by two processes give the
    episodes one process plays (each game's episodes depend on the game and the seed only)."""
    from skillduet_plugin.warmstart.reading import reading_episodes

    env = reading_games
    tasks = list(env.tasks)[:4]
    kw = dict(max_turns=12, counterfactuals=2, global_episodes=1, seed=5)
    one = reading_episodes(env, tasks, "alfworld", **kw)
    two = reading_episodes(env, tasks, "alfworld", workers=2, env_kwargs=env.kwargs, **kw)
    assert [(e.kind, e.record.task_id, e.record.actions, e.plan) for e in one] == \
        [(e.kind, e.record.task_id, e.record.actions, e.plan) for e in two]
    assert {e.kind for e in one} == {"true", "standin", "none", "global"}
    # negative control: the comparison sees the order (the games played the other way round)
    other = reading_episodes(env, tasks[::-1], "alfworld", **kw)
    assert [(e.kind, e.record.task_id) for e in other] != [(e.kind, e.record.task_id) for e in one]
