"""The offline analyzer on hand-built ALFWorld trajectories (real ALFWorld text): pair, procedure, correction; the
Local skill's first line names this game's receptacles exactly as the actions do, and a Global never carries it."""

from __future__ import annotations

import re

from llm_trajectories import ALF_INIT, CLEAN_TASK, clean_failure, clean_success, traj

from skillduet_plugin.config import BackendConfig
from skillduet_plugin.llm import ChatRequest, make_backend
from skillduet_plugin.llm.offline import respond

SCOPE = "pick_clean_then_place_in_recep"


def _ask(kind: str, **fields) -> str:
    payload = {"kind": kind, "env": "alfworld", "task": CLEAN_TASK, "scope": SCOPE, **fields}
    out = respond(payload)
    assert out.startswith("<skill>\n") and out.endswith("\n</skill>")
    return out


def _bullets(text: str) -> list[str]:
    return [line[2:] for line in text.splitlines() if line.startswith("- ")]


FOUND_KNIFE = ("In this game: the knife was in countertop 2: go to countertop 2 and take knife 1 from countertop 2.")
INSTANCE = re.compile(r"\b(knife|drawer|countertop|sinkbasin|desk|desklamp|alarmclock|cabinet|mug) \d")


def test_pair_skill_says_clean_before_placing():
    out = _ask("local_pair", success=clean_success(), failure=clean_failure())
    lines = _bullets(out)
    assert lines.pop(0) == FOUND_KNIFE
    assert lines[0] == ("Key decision: after 'take the knife from the countertop', do 'clean the knife with the "
                        "sinkbasin' next (the successful attempt did); the failed attempt did 'move the knife to "
                        "the drawer' instead.")
    assert lines[1] == ("In the failed attempt: moved the knife to the drawer before it was cleaned: clean the knife "
                        "with the sinkbasin first, then move it to the drawer.")
    procedure = next(line for line in lines if line.startswith("Procedure"))
    assert procedure.index("take the knife") < procedure.index("clean the knife") < procedure.index(
        "move the knife to the drawer")
    assert "drawer was closed: open it first" in out
    # instance numbers appear in the first line only (this game's own), never in the class-level lines
    assert not any(INSTANCE.search(line) for line in lines)


def test_outputs_are_deterministic():
    a = _ask("local_pair", success=clean_success(), failure=clean_failure())
    b = _ask("local_pair", success=clean_success(), failure=clean_failure())
    assert a == b


def test_procedure_collapses_useless_steps_and_keeps_the_order():
    out = _ask("local_procedure", trajectory=clean_success())
    lines = _bullets(out)
    assert lines.pop(0) == FOUND_KNIFE
    assert lines[0] == (
        "Procedure for clean-X-then-put-in-Y tasks (e.g. 'put a clean knife in drawer'): 1) find the knife by "
        "checking receptacles in turn (here: countertop; open closed ones) and take the knife from the countertop "
        "where you see it; 2) go to the sinkbasin and clean the knife with the sinkbasin; 3) go to the drawer, "
        "open it and move the knife to the drawer.")
    assert lines[1].startswith("Sub-goal order: take the knife -> clean it with the sinkbasin -> move it to the "
                               "drawer")
    assert lines[2].startswith("Solved in 9 actions, 1 unnecessary")  # the 'look'
    assert "look" not in lines[0]


def test_correction_names_order_invalid_action_loop_and_step_budget():
    lines = _bullets(_ask("local_correction", trajectory=clean_failure()))
    assert lines.pop(0) == FOUND_KNIFE  # the failure took the knife there too
    assert lines[0] == ("Moved the knife to the drawer before it was cleaned: clean the knife with the sinkbasin "
                        "first, then move it to the drawer.")
    assert lines[1] == ("For clean-X-then-put-in-Y tasks the required order is: take the knife -> clean it with "
                        "the sinkbasin -> move it to the drawer.")
    assert lines[2] == ("1 action(s) gave 'Nothing happens.' (invalid, state unchanged): 'move the knife to the "
                        "drawer' failed because the drawer was closed: open it first.")
    assert lines[3].startswith("Stuck in a loop: repeated look 4 times")
    # wasted = 1 invalid move + 4 looks
    assert lines[4] == ("Ran out of steps after 10 actions, 5 of them wasted on invalid, repeated or "
                        "look/inventory/examine actions.")


def test_correction_when_the_object_was_never_found_suggests_unvisited_receptacles():
    steps = [("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."),
             ("open cabinet 1", "You open the cabinet 1. The cabinet 1 is open. In it, you see a bowl 1."),
             ("take knife 1 from cabinet 1", "Nothing happens."),
             ("go to cabinet 2", "You arrive at cabinet 2. On the cabinet 2, you see a peppershaker 1.")]
    lines = _bullets(_ask("local_correction", trajectory=traj("f1", CLEAN_TASK, steps, False, initial=ALF_INIT)))
    assert lines[0] == ("Never picked up a knife: search the receptacles not yet checked, e.g. coffeemachine, "
                        "countertop, drawer, fridge, garbagecan, ..., opening closed ones, and take the knife as "
                        "soon as you see it.")
    assert "'take the knife from the cabinet' failed: take only an object the observation lists" in lines[2]


def test_heat_task_taken_but_never_heated():
    task = "heat some egg and put it in countertop."
    steps = [("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
             ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a egg 2."),
             ("take egg 2 from fridge 1", "You pick up the egg 2 from the fridge 1."),
             ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a bread 1."),
             ("move egg 2 to countertop 1", "You move the egg 2 to the countertop 1.")]
    out = respond({"kind": "local_correction", "env": "alfworld", "task": task, "scope": "pick_heat",
                   "trajectory": traj("h", task, steps, False)})
    assert "Moved the egg to the countertop before it was heated: heat the egg with the microwave first" in out
    assert "take the egg -> heat it with the microwave -> move it to the countertop" in out


def test_pick_two_with_one_placed_asks_for_a_second_object():
    task = "put two cd in safe."
    steps = [("go to desk 1", "You arrive at desk 1. On the desk 1, you see a cd 1, and a pen 2."),
             ("take cd 1 from desk 1", "You pick up the cd 1 from the desk 1."),
             ("go to safe 1", "You arrive at safe 1. The safe 1 is open. In it, you see nothing."),
             ("move cd 1 to safe 1", "You move the cd 1 to the safe 1.")]
    out = respond({"kind": "local_correction", "env": "alfworld", "task": task, "scope": "pick_two_obj_and_place",
                   "trajectory": traj("p2", task, steps, False)})
    assert "Only one cd reached the safe: after placing the first, find and take a second cd" in out


def test_look_task_without_the_lamp():
    task = "examine the alarmclock with the desklamp."
    steps = [("go to desk 1", "You arrive at desk 1. On the desk 1, you see a alarmclock 1, and a desklamp 1."),
             ("take alarmclock 1 from desk 1", "You pick up the alarmclock 1 from the desk 1."),
             ("inventory", "You are carrying: a alarmclock 1."), ("inventory", "You are carrying: a alarmclock 1.")]
    out = respond({"kind": "local_correction", "env": "alfworld", "task": task, "scope": "look_at_obj_in_light",
                   "trajectory": traj("lk", task, steps, False)})
    assert "Never used the desklamp: carry the alarmclock to where the desklamp is and use the desklamp" in out
    assert "take the alarmclock -> go to the desklamp -> use the desklamp while holding the alarmclock" in out


def test_invalid_take_while_holding_something():
    steps = [("go to countertop 2", "You arrive at countertop 2. On the countertop 2, you see a knife 1, and a "
                                    "spatula 2."),
             ("take spatula 2 from countertop 2", "You pick up the spatula 2 from the countertop 2."),
             ("take knife 1 from countertop 2", "Nothing happens.")]
    out = respond({"kind": "local_correction", "env": "alfworld", "task": CLEAN_TASK, "scope": SCOPE,
                   "trajectory": traj("h2", CLEAN_TASK, steps, False)})
    assert ("'take the knife from the countertop' failed while already holding the spatula: carry one object at "
            "a time") in out
    assert "Never picked up a knife (it took the spatula instead)" in out


def test_through_the_backend_with_unknown_and_malformed_payloads():
    backend = make_backend(BackendConfig(kind="offline", max_retries=3, backoff_s=0.0))
    requests = [ChatRequest(messages=[], payload={"kind": "local_procedure", "env": "alfworld", "task": CLEAN_TASK,
                                                  "scope": SCOPE, "trajectory": clean_success()}),
                ChatRequest(messages=[], payload={"kind": "mystery"}),
                ChatRequest(messages=[{"role": "user", "content": "no payload"}]),
                ChatRequest(messages=[], payload={"kind": "local_correction", "env": "alfworld",
                                                  "trajectory": {"actions": ["look", 3], "observations": []}})]
    out = backend.generate(requests)
    assert out[0] is not None and out[0].startswith("<skill>")
    assert out[1:] == [None, None, None]
    # permanent faults are not retried
    assert backend.failures == 3 and backend.attempts == 4 and backend.retries == 0
    assert "payload['trajectory']['actions'] must be a list of strings" in backend.last_error


def test_chat_derived_observations_are_unwrapped_and_may_lack_the_last_one():
    steps = clean_failure()
    wrapped = [f"You are now at step {i + 2} and your current observation is: {o}\nYour admissible actions of "
               "the current situation are: ['go to drawer 1', 'look']."
               for i, o in enumerate(steps["observations"][1:])]
    assert _ask("local_correction", trajectory=dict(steps, observations=wrapped)) == _ask(
        "local_correction", trajectory=clean_failure())
    # the episode ended on the last action, so the chat has no turn after it
    lines = _bullets(_ask("local_correction", trajectory=dict(steps, observations=wrapped[:-1])))
    assert lines[1].startswith("Moved the knife to the drawer before it was cleaned")
    assert lines[-1].startswith("Ran out of steps after 10 actions")


def test_look_procedure_uses_the_lamp_while_holding_the_object():
    task = "examine the alarmclock with the desklamp."
    steps = [("go to desk 1",
              "You arrive at desk 1. On the desk 1, you see a alarmclock 1, a desklamp 1, and a pen 1."),
             ("take alarmclock 1 from desk 1", "You pick up the alarmclock 1 from the desk 1."),
             ("use desklamp 1", "You turn on the desklamp 1.")]
    out = respond({"kind": "local_procedure", "env": "alfworld", "task": task, "scope": "look_at_obj_in_light",
                   "trajectory": traj("l", task, steps, True)})
    assert ("1) go to the desk and take the alarmclock from the desk; 2) use the desklamp while holding the "
            "alarmclock.") in out


def test_the_first_line_names_where_the_target_and_the_lamp_were_exactly_as_the_actions_do():
    task = "examine the alarmclock with the desklamp."
    steps = [("go to drawer 2", "You arrive at drawer 2. The drawer 2 is closed."),
             ("open drawer 2", "You open the drawer 2. The drawer 2 is open. In it, you see a alarmclock 3."),
             ("take alarmclock 3 from drawer 2", "You pick up the alarmclock 3 from the drawer 2."),
             ("go to sidetable 1", "You arrive at sidetable 1. On the sidetable 1, you see a desklamp 1."),
             ("use desklamp 1", "You turn on the desklamp 1.")]
    lines = _bullets(respond({"kind": "local_procedure", "env": "alfworld", "task": task,
                              "scope": "look_at_obj_in_light", "trajectory": traj("l2", task, steps, True)}))
    assert lines[0] == ("In this game: the alarmclock was in drawer 2, the desklamp at sidetable 1: go to drawer 2 "
                        "and take alarmclock 3 from drawer 2, then go to sidetable 1 and use desklamp 1.")
    # every receptacle the line names is spelled as an action of the episode spells it
    for name in ("drawer 2", "sidetable 1"):
        assert f"go to {name}" in lines[0] and f"go to {name}" in [a for a, _ in steps]
    # negative control: an episode that never took the target has no such line
    never = [("go to drawer 2", "You arrive at drawer 2. The drawer 2 is closed.")]
    out = respond({"kind": "local_correction", "env": "alfworld", "task": task, "scope": "look_at_obj_in_light",
                   "trajectory": traj("l3", task, never, False)})
    assert "In this game" not in out and not INSTANCE.search(out)


def test_a_global_holds_class_level_text_only():
    """The offline synthesizer drops each Local skill's one-game line, and so does the consolidation's fallback
    (a Local skill flattened to an item when the synthesizer fails)."""
    from skillduet_plugin.llm.offline_common import GAME_LINE_PREFIX
    from skillduet_plugin.skills.consolidate import skill_as_item
    from skillduet_plugin.skills.types import Skill

    skills = [_ask("local_procedure", trajectory=clean_success()),
              _ask("local_pair", success=clean_success(), failure=clean_failure())]
    assert all(INSTANCE.search(s) and GAME_LINE_PREFIX in s for s in skills)  # the inputs do name instances
    for payload in ({"kind": "synthesize", "current": [], "new": skills, "budget_tokens": 400},
                    {"kind": "compress", "items": [t for s in skills for t in _bullets(s)], "target_items": 3}):
        answer = respond(payload)
        assert "Procedure for clean-X-then-put-in-Y" in answer  # the class-level lines are kept
        assert GAME_LINE_PREFIX not in answer and not INSTANCE.search(answer), answer
    item = skill_as_item(Skill(text=skills[0], scope="clean", kind="procedure"))
    assert "Procedure for clean" in item and GAME_LINE_PREFIX not in item and not INSTANCE.search(item)


def test_real_valid_unseen_walkthroughs(shared_data, tmp_path_factory):
    """All 134 official valid_unseen games: the real task text parses to the game's task type, the procedure
    from the expert walkthrough keeps the sub-goal order, and a walkthrough with its key step removed gets the
    matching correction."""
    import json
    import tarfile

    from skillduet_plugin.llm.offline_alfworld import parse_task

    archive = shared_data / "alfworld" / "valid_unseen.tar.xz"
    root = tmp_path_factory.mktemp("valid_unseen")
    with tarfile.open(archive) as tar:
        tar.extractall(root, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    games = sorted(root.glob("json_2.1.1/valid_unseen/*/*/game.tw-pddl"))
    assert len(games) == 134
    past = {"clean": "cleaned", "heat": "heated", "cool": "cooled"}
    checked = 0
    for game in games:
        text = game.read_text()
        task = re.search(r"Your task is to: ([^\"\\]*)", text).group(1)
        task_type = game.parts[-3].split("-")[0]
        parsed = parse_task(task)
        assert parsed.task_type == task_type, task
        walk = json.loads(text)["walkthrough"]
        payload = {"env": "alfworld", "task": task, "scope": task_type}
        proc = respond({**payload, "kind": "local_procedure",
                        "trajectory": traj("w", task, [(a, "") for a in walk], True)})
        o, r = parsed.obj, parsed.recep
        moved = any(a.startswith(f"move {o} ") for a in walk)  # some expert runs end early (goal already met)
        if parsed.transform:
            verb = parsed.transform
            assert proc.index(f"take the {o}") < proc.index(f"{verb} the {o} with the"), proc
            if moved:
                assert proc.index(f"{verb} the {o} with the") < proc.index(f"move the {o} to the {r}"), proc
                broken = [a for a in walk if not a.startswith(verb + " ")]
                fix = respond({**payload, "kind": "local_correction",
                               "trajectory": traj("b", task, [(a, "") for a in broken], False)})
                assert f"Moved the {o} to the {r} before it was {past[verb]}" in fix, fix
        elif task_type == "pick_two_obj_and_place":
            assert proc.count(f"move the {o} to the {r}") == 2, proc
        elif task_type == "look_at_obj_in_light":
            assert f"take the {o}" in proc and f"use the {parsed.lamp}" in proc, proc
        else:
            assert proc.index(f"take the {o}") < proc.index(f"move the {o} to the {r}"), proc
            fix = respond({**payload, "kind": "local_correction",
                           "trajectory": traj("b", task, [(a, "") for a in walk[:-1]], False)})
            assert f"took the {o} but never moved it to the {r}" in fix, fix
        checked += 1
    assert checked == 134
