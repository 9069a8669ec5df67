"""The ALFWorld adapter on the official game files: task panels, info contract, engine-identical observations."""

from __future__ import annotations

from collections import Counter

import pytest

from skillduet_plugin.envs import check_info, make
from skillduet_plugin.envs.alfworld import task_type_of

pytest.importorskip("alfworld")

UNSEEN_FIRST = "valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/trial_T20190908_222917_366542"
UNSEEN_LAST = "valid_unseen/pick_two_obj_and_place-ToiletPaper-None-Cabinet-424/trial_T20190906_202926_527010"
SEEN_FIRST = "valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790"
SEEN_LAST = "valid_seen/pick_two_obj_and_place-Watch-None-Dresser-205/trial_T20190907_182211_592010"


@pytest.fixture(scope="module")
def unseen(alfworld_real_data):
    env = make("alfworld", data_dir=str(alfworld_real_data), split="valid_unseen")
    yield env
    env.close()


def _direct_textworld(gamefile: str):
    """The engine as ALFWorld's own AlfredTWEnv wires it (no adapter, no caches)."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    return textworld.start(gamefile, infos, wrappers=[AlfredDemangler, AlfredInfos])


def test_valid_unseen_panel_is_the_official_134(unseen):
    tasks = unseen.tasks
    assert len(tasks) == 134 and tasks == sorted(tasks)
    assert tasks[0] == UNSEEN_FIRST and tasks[-1] == UNSEEN_LAST
    counts = Counter(unseen.task_type(t) for t in tasks)
    assert counts == {"pick": 24, "look": 18, "clean": 31, "heat": 23, "cool": 21, "pick2": 17}


def test_valid_seen_panel_is_140_in_fixed_order(alfworld_real_data):
    env = make("alfworld", data_dir=alfworld_real_data, split="valid_seen")
    again = make("alfworld", data_dir=alfworld_real_data / "json_2.1.1", split="valid_seen")
    assert len(env.tasks) == 140 and env.tasks == again.tasks == sorted(env.tasks)
    assert env.tasks[0] == SEEN_FIRST and env.tasks[-1] == SEEN_LAST
    assert Counter(map(task_type_of, env.tasks)) == {"pick": 35, "look": 13, "clean": 27, "heat": 16,
                                                     "cool": 25, "pick2": 24}


def test_task_subsets(alfworld_real_data):
    env = make("alfworld", data_dir=alfworld_real_data, split="valid_unseen", max_tasks=5)
    assert env.tasks == make("alfworld", data_dir=alfworld_real_data, split="valid_unseen").tasks[:5]
    heat = make("alfworld", data_dir=alfworld_real_data, split="valid_unseen", task_types=["heat"])
    assert len(heat.tasks) == 23 and all("pick_heat_then_place_in_recep-" in t for t in heat.tasks)
    pair = [UNSEEN_LAST, UNSEEN_FIRST]
    assert make("alfworld", data_dir=alfworld_real_data, split="valid_unseen", tasks=pair).tasks == pair
    with pytest.raises(KeyError, match="unknown task ids"):
        make("alfworld", data_dir=alfworld_real_data, split="valid_unseen", tasks=["valid_unseen/nope/trial_x"])


def test_reset_info_contract_and_task(unseen):
    obs, info = unseen.reset(UNSEEN_FIRST)
    check_info(info)
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.")
    assert obs.endswith("\n\nYour task is to: examine the alarmclock with the desklamp.")
    assert info["task"] == "examine the alarmclock with the desklamp."
    assert info["task_type"] == "look" and info["step"] == 0 and info["won"] is False and info["score"] == 0.0
    assert info["gamefile"].endswith(UNSEEN_FIRST + "/game.tw-pddl")
    assert info["admissible_actions"][:2] == ["go to bed 1", "go to desk 1"]
    assert "help" in info["admissible_actions"] and info["admissible_actions"] == sorted(info["admissible_actions"])


@pytest.mark.parametrize("index", [0, 77, 133])
def test_observations_equal_a_direct_textworld_run(unseen, index):
    task = unseen.tasks[index]
    gamefile = str(unseen.game_file(task))
    direct = _direct_textworld(gamefile)
    ref_state = direct.reset()
    obs, info = unseen.reset(task)
    assert obs == ref_state.feedback and info["admissible_actions"] == ref_state["admissible_commands"]
    # the walkthrough with an invalid command and an inventory check in between
    commands = unseen.walkthrough(task)
    commands = commands[:2] + ["fly to the moon", "inventory"] + commands[2:]
    for command in commands:
        ref_state, _, ref_done = direct.step(command)
        obs, reward, done, info = unseen.step(command)
        assert obs == ref_state.feedback
        assert info["admissible_actions"] == ref_state["admissible_commands"]
        assert info["won"] == ref_state["won"] and done == ref_done
    assert info["won"] and reward == 1.0 and info["score"] == 1.0
    direct.close()


def test_invalid_action_changes_nothing(unseen):
    obs0, info0 = unseen.reset(UNSEEN_FIRST)
    obs, reward, done, info = unseen.step("take alarmclock 1 from desk 2")  # not there yet
    assert obs == "Nothing happens." and reward == 0.0 and not done
    assert info["action_admissible"] is False and info["step"] == 1
    assert info["admissible_actions"] == info0["admissible_actions"]
    obs, _, _, info = unseen.step("go to desk 2")
    assert obs == "You arrive at desk 2. On the desk 2, you see a alarmclock 1."
    assert info["action_admissible"] is True and "take alarmclock 1 from desk 2" in info["admissible_actions"]


def test_reset_restores_the_initial_state(unseen):
    obs0, info0 = unseen.reset(UNSEEN_FIRST)
    unseen.step("go to desk 2")
    unseen.step("take alarmclock 1 from desk 2")
    obs1, info1 = unseen.reset(UNSEEN_FIRST)
    assert obs1 == obs0 and info1 == info0
    _, _, _, info = unseen.step("inventory")
    assert info["admissible_actions"] == info0["admissible_actions"]


def test_fifty_step_limit(unseen):
    unseen.reset(UNSEEN_LAST)
    for n in range(1, 51):
        obs, reward, done, info = unseen.step("look")
        assert done == (n == 50) and reward == 0.0 and info["step"] == n
    assert not info["won"]
    # after the end nothing changes and nothing is earned
    assert unseen.step("look") == (obs, 0.0, True, info)


def test_max_steps_is_configurable(alfworld_real_data):
    env = make("alfworld", data_dir=alfworld_real_data, split="valid_unseen", max_steps=3)
    env.reset(UNSEEN_FIRST)
    assert [env.step("look")[2] for _ in range(3)] == [False, False, True]
    with pytest.raises(ValueError, match="max_steps"):
        make("alfworld", data_dir=alfworld_real_data, split="valid_unseen", max_steps=0)


def test_bad_arguments_are_named(alfworld_real_data, unseen, tmp_path):
    with pytest.raises(FileNotFoundError, match="split='nope'"):
        make("alfworld", data_dir=alfworld_real_data, split="nope")
    with pytest.raises(FileNotFoundError, match="data_dir="):
        make("alfworld", data_dir=tmp_path, split="valid_unseen")
    with pytest.raises(TypeError, match="unknown keyword"):
        make("alfworld", data_dir=alfworld_real_data, split="valid_unseen", max_step=3)
    with pytest.raises(KeyError, match="task_id="):
        unseen.reset("valid_unseen/not-a-task/trial_0")
    fresh = make("alfworld", data_dir=alfworld_real_data, split="valid_unseen")
    with pytest.raises(RuntimeError, match="before reset"):
        fresh.step("look")


def test_alfworld_data_env_var_is_used(alfworld_real_data, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(alfworld_real_data))
    env = make("alfworld", split="valid_unseen")
    assert len(env.tasks) == 134 and env.layout_root == (alfworld_real_data / "json_2.1.1").resolve()


@pytest.mark.parametrize("index, seed", [(20, 0), (100, 1)])
def test_random_admissible_rollout_equals_a_direct_textworld_run(unseen, index, seed):
    """Open/close/examine/take/move sequences, not only expert ones, render exactly as in the plain engine."""
    import random

    task = unseen.tasks[index]
    direct = _direct_textworld(str(unseen.game_file(task)))
    ref_state = direct.reset()
    _, info = unseen.reset(task)
    rng = random.Random(seed)
    for _ in range(15):
        command = rng.choice([a for a in info["admissible_actions"] if a != "help"])
        ref_state, _, _ = direct.step(command)
        obs, _, _, info = unseen.step(command)
        assert (obs, info["admissible_actions"]) == (ref_state.feedback, ref_state["admissible_commands"])
    direct.close()
