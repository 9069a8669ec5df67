"""The searching expert: plays from what the task sentence says (never the hidden location), wins real and
generated games, searches in a seed-dependent order, and skips the task variants it does not handle."""

from __future__ import annotations

from collections import Counter

import pytest

from skillduet_plugin.envs import make
from skillduet_plugin.envs.alfworld.expert import TaskParams, task_params

pytest.importorskip("alfworld")


def _run_expert(env, task_id, expert, max_turns=50):
    """Play ``task_id`` with ``expert`` (every action must be admissible): its actions and whether it won."""
    obs, info = env.reset(task_id)
    actions = []
    for turn in range(max_turns):
        action = expert(obs, info, turn)
        assert action in info["admissible_actions"], (task_id, action)
        actions.append(action)
        obs, _, done, info = env.step(action)
        if done:
            break
    return actions, bool(info["won"])


def _play(env, task_id, seed, max_turns=50):
    return _run_expert(env, task_id, env.searching_expert(task_id, seed), max_turns)


def test_task_params_from_the_task_directory():
    assert task_params("valid_unseen/pick_clean_then_place_in_recep-Bowl-None-Cabinet-10/trial_T1") == \
        TaskParams("clean", "bowl", "cabinet", "", 1)
    assert task_params("train/look_at_obj_in_light-AlarmClock-None-DeskLamp-1457/trial_G0") == \
        TaskParams("look", "alarmclock", "", "desklamp", 1)
    assert task_params("x/pick_two_obj_and_place-Book-None-Cabinet-1413/trial_G0").count == 2
    # variants it does not play: sliced objects, movable receptacles
    assert task_params("x/pick_heat_then_place_in_recep-AppleSliced-None-DiningTable-1/trial_T1") is None
    assert task_params("x/pick_and_place_simple-Pen-Mug-Desk-1/trial_T1") is None
    assert task_params("not/a/task") is None


def test_wins_every_generated_game_of_each_type(alfworld_generated):
    env = make("alfworld", data_dir=alfworld_generated, split="train")
    try:
        won = Counter()
        for task_id in env.tasks:
            for seed in (0, 1):
                actions, ok = _play(env, task_id, seed)
                assert ok, (task_id, seed, actions)
                won[env.task_type(task_id)] += 1
        assert won == {t: 4 for t in ("pick", "look", "clean", "heat", "cool", "pick2")}
    finally:
        env.close()


def test_searches_in_a_seeded_order_and_only_takes_the_target(alfworld_generated):
    env = make("alfworld", data_dir=alfworld_generated, split="train")
    try:
        firsts = set()
        for task_id in env.tasks:
            params = task_params(task_id)
            runs = {seed: _play(env, task_id, seed)[0] for seed in range(4)}
            assert runs[0] == _play(env, task_id, 0)[0]  # deterministic per seed
            for actions in runs.values():
                takes = [a for a in actions if a.startswith("take ")]
                assert takes and all(a.split()[1] == params.obj for a in takes)
                assert "look" not in actions and not any(a.startswith("close ") for a in actions)
            firsts |= {actions[0] for actions in runs.values()}
        assert len(firsts) > len(env.tasks)  # different seeds start the search in different places
    finally:
        env.close()


def test_does_not_know_where_the_object_is(alfworld_generated):
    """Over seeds, the expert often looks in the wrong place first: its first receptacle is the walkthrough's
    (the object's true location) only about as often as chance among the plausible receptacles."""
    env = make("alfworld", data_dir=alfworld_generated, split="train")
    try:
        hits = total = 0
        for task_id in env.tasks:
            target = env.walkthrough(task_id)[0]
            for seed in range(6):
                hits += _play(env, task_id, seed, max_turns=1)[0][0] == target
                total += 1
        assert 0 < hits < 0.6 * total
    finally:
        env.close()


@pytest.mark.slow
def test_wins_official_valid_unseen_games(alfworld_real_data):
    """4 games per task type of the official split (all 134 win within 50 steps; measured once, ~100 s)."""
    env = make("alfworld", data_dir=alfworld_real_data, split="valid_unseen")
    try:
        by_type: dict[str, list[str]] = {}
        for task_id in env.tasks:
            by_type.setdefault(env.task_type(task_id), []).append(task_id)
        assert len(by_type) == 6
        for task_type, tasks in by_type.items():
            for task_id in tasks[:4]:
                actions, ok = _play(env, task_id, seed=0)
                assert ok, (task_id, actions)
    finally:
        env.close()


def test_a_hint_sends_the_search_first_where_another_episode_took_the_target(alfworld_generated):
    """A Local skill says where the target was taken ("take the X from the Y"); the expert given that episode's
    actions searches that receptacle class first, and never needs more actions than without the hint."""
    from skillduet_plugin.envs.alfworld.expert import hint_classes

    env = make("alfworld", data_dir=alfworld_generated, split="train")
    try:
        shorter = 0
        for task_id in env.tasks:
            params = task_params(task_id)
            donor, _ = _play(env, task_id, seed=1)
            classes = hint_classes(donor)
            assert classes and all(c.isalpha() for c in classes)
            plain, _ = _play(env, task_id, seed=0)
            hinted, won = _run_expert(env, task_id, env.searching_expert(task_id, 0, classes))
            assert won, (task_id, hinted)
            first_go = next(a for a in hinted if a.startswith("go to "))
            takes = [a for a in hinted if a.startswith(f"take {params.obj} ")]
            assert first_go.split()[2] == classes[0] or not hinted[0].startswith("go to"), (task_id, hinted)
            assert takes and takes[0].split(" from ")[1].split()[0] == classes[0]  # taken where the hint said
            assert len(hinted) <= len(plain) or params.count == 2, (task_id, plain, hinted)
            shorter += len(hinted) < len(plain)
        assert shorter > 0  # negative control: the hint changes some episodes (the plain search is not the same)
    finally:
        env.close()


def test_an_exact_hint_sends_the_expert_first_to_the_named_receptacle_and_lamp(alfworld_generated):
    """A Local skill names where the target was taken and the lamp used, exactly as the actions do ("cabinet 2");
    the expert given that episode's actions goes to that very receptacle first, and for look, once it holds the
    target, to that lamp."""
    from skillduet_plugin.envs.alfworld.expert import Hint, hint_of

    assert hint_of(["go to desk 1", "take pen 1 from desk 1", "go to dresser 2", "use desklamp 1"]) == Hint(
        ("desk 1",), ("dresser 2",))
    assert hint_of(["go to desk 1"]) == Hint() and not Hint()
    env = make("alfworld", data_dir=alfworld_generated, split="train")
    try:
        differs = 0
        for task_id in env.tasks:
            donor, _ = _play(env, task_id, seed=1)
            hint = hint_of(donor)
            hinted, won = _run_expert(env, task_id, env.searching_expert(task_id, 0, hint=hint))
            assert won, (task_id, hinted)
            assert hinted[0] == f"go to {hint.places[0]}", (task_id, hint, hinted)
            if hint.lamp_places:
                taken = next(k for k, a in enumerate(hinted) if a.startswith("take "))
                assert hinted[taken + 1] == f"go to {hint.lamp_places[0]}" or hinted[taken + 1].startswith("use ")
            differs += hinted != _play(env, task_id, seed=0)[0]
        assert differs > 0  # negative control: without the hint some episodes search elsewhere first
    finally:
        env.close()
