"""ALFWorld rules of the offline analyzer: task parsing, action state tracking, procedures and corrections.

Everything is derived from the trajectory's own actions and observations plus the six ALFWorld task templates;
instance numbers are dropped ("knife 1" -> "the knife") so a skill carries over to other games of its type, except
in a Local skill's first line (:func:`found_line`): where this game's target was taken, and for ``look`` where the
lamp was used, named exactly as the actions name them ("go to cabinet 2 and take mug 1 from cabinet 2"), so that
a policy can copy them into its actions. That line starts with ``GAME_LINE_PREFIX``, and the offline synthesizer
drops it: a Global holds class-level text only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from skillduet_plugin.llm.offline_alfworld_actions import Act, parse_action, phrase
from skillduet_plugin.llm.offline_common import (GAME_LINE_PREFIX, OfflineRules, Traj, find_loop, first_divergence,
                                                 join_list, quote, register_offline_rules, strip_instance)

# task type -> templates (alfworld 0.4 goal library), most specific first
_TASK_TEMPLATES: list[tuple[str, str]] = [
    ("pick_clean_then_place_in_recep", r"put a clean (?P<obj>.+?) (?:in|on) (?P<recep>.+)"),
    ("pick_clean_then_place_in_recep", r"clean some (?P<obj>.+?) and put it (?:in|on) (?P<recep>.+)"),
    ("pick_heat_then_place_in_recep", r"put a hot (?P<obj>.+?) (?:in|on) (?P<recep>.+)"),
    ("pick_heat_then_place_in_recep", r"heat some (?P<obj>.+?) and put it (?:in|on) (?P<recep>.+)"),
    ("pick_cool_then_place_in_recep", r"put a cool (?P<obj>.+?) (?:in|on) (?P<recep>.+)"),
    ("pick_cool_then_place_in_recep", r"cool some (?P<obj>.+?) and put it (?:in|on) (?P<recep>.+)"),
    ("pick_two_obj_and_place", r"put two (?P<obj>.+?) (?:in|on) (?P<recep>.+)"),
    ("pick_two_obj_and_place", r"find two (?P<obj>.+?) and put them (?:in|on) (?P<recep>.+)"),
    ("look_at_obj_in_light", r"look at (?P<obj>.+?) under the (?P<lamp>.+)"),
    ("look_at_obj_in_light", r"examine the (?P<obj>.+?) with the (?P<lamp>.+)"),
    ("pick_and_place_simple", r"put (?:a|an|some) (?P<obj>.+?) (?:in|on) (?P<recep>.+)"),
]
_TRANSFORM = {"pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
              "pick_cool_then_place_in_recep": "cool"}
_STATION = {"clean": "sinkbasin", "heat": "microwave", "cool": "fridge"}
_PAST = {"clean": "cleaned", "heat": "heated", "cool": "cooled"}
_USELESS = {"look", "inventory", "examine", "help", "close"}
_MILESTONES = {"take", "move", "clean", "heat", "cool", "use", "slice"}


@dataclass(frozen=True)
class AlfTask:
    task_type: str
    obj: str | None = None
    recep: str | None = None
    lamp: str | None = None
    text: str = ""  # the instruction, without "Your task is to:" and the final period

    @property
    def transform(self) -> str | None:
        return _TRANSFORM.get(self.task_type)


def parse_task(task: str, scope: str = "") -> AlfTask:
    """The task type and its arguments from the instruction (``scope`` when the text matches no template)."""
    text = task.lower()
    if "your task is to:" in text:
        text = text.split("your task is to:", 1)[1]
    text = text.strip().rstrip(".").strip()
    for task_type, pattern in _TASK_TEMPLATES:
        m = re.fullmatch(pattern, text)
        if m:
            groups = {k: strip_instance(v) for k, v in m.groupdict().items()}
            return AlfTask(task_type, groups.get("obj"), groups.get("recep"), groups.get("lamp"), text)
    return AlfTask(scope or "unknown", text=text)


@dataclass
class Replay:
    """What the agent did, replayed from the transcript: milestones and the reason of each invalid action."""

    milestones: list[tuple[int, Act]] = field(default_factory=list)
    invalid_reasons: list[str] = field(default_factory=list)
    visited: list[str] = field(default_factory=list)
    useful: list[tuple[int, Act]] = field(default_factory=list)
    wasted: int = 0


def replay(traj: Traj) -> Replay:
    out = Replay()
    location: str | None = None
    holding: str | None = None
    closed: set[str] = set()
    for step in traj.steps:
        act = parse_action(step.action)
        if step.invalid:
            out.wasted += 1
            out.invalid_reasons.append(_why_invalid(act, location, holding, closed))
            continue
        if act.verb in _USELESS or act.verb == "other":
            out.wasted += 1
            continue
        if act.verb == "go":
            if location == act.recep:
                out.wasted += 1
                continue
            location = act.recep
            out.visited.append(act.r)
            if re.search(rf"the {re.escape(act.recep or '')} is closed", step.observation, re.IGNORECASE):
                closed.add(act.recep or "")
        elif act.verb == "open":
            closed.discard(act.recep or "")
        elif act.verb == "take":
            holding = act.obj
        elif act.verb == "move":
            holding = None
        out.useful.append((step.index, act))
        if act.verb in _MILESTONES:
            out.milestones.append((step.index, act))
    return out


def _why_invalid(act: Act, location: str | None, holding: str | None, closed: set[str]) -> str:
    """Why an action produced "Nothing happens.", judged from the replayed state before it."""
    said = quote(phrase(act))
    held = strip_instance(holding) if holding else None
    if act.verb == "take":
        if holding:
            return f"{said} failed while already holding the {held}: carry one object at a time"
        if location != act.recep:
            return f"{said} failed away from the {act.r}: go to the {act.r} first"
        if act.recep in closed:
            return f"{said} failed because the {act.r} was closed: open it first"
        return f"{said} failed: take only an object the observation lists at your location"
    if act.verb in ("move", "clean", "heat", "cool"):
        if holding is None:
            return f"{said} failed with empty hands: take the {act.o} first"
        if holding != act.obj:
            return f"{said} failed while holding the {held}, not the {act.o}"
        if location != act.recep:
            return f"{said} failed away from the {act.r}: go to the {act.r} first"
        if act.recep in closed:
            return f"{said} failed because the {act.r} was closed: open it first"
        return f"{said} failed: use the exact names from the admissible actions"
    if act.verb == "go" and location == act.recep:
        return f"{said} failed: you were already there"
    if act.verb in ("open", "close", "use") and location is None:
        return f"{said} failed: go to it first"
    return f"{said} is not an admissible command: copy an action from the admissible list exactly"


def found_line(task: AlfTask, traj: Traj) -> str | None:
    """Where this game's target was taken (and, for ``look``, where the lamp was used), exactly as the actions name
    those receptacles: ``In this game: the mug was in cabinet 2: go to cabinet 2 and take mug 1 from cabinet
    2.`` None when the trajectory never took the target."""
    if task.obj is None:
        return None
    here: str | None = None
    places: list[str] = []
    steps: list[str] = []
    lamp_at = ""
    for step in traj.steps:
        act = parse_action(step.action)
        if step.invalid:
            continue
        if act.verb == "go":
            here = act.recep
        elif act.verb == "take" and act.o == task.obj and act.recep and act.recep not in places:
            places.append(act.recep)
            steps.append(f"go to {act.recep} and take {act.obj} from {act.recep}")
        elif act.verb == "use" and task.lamp and act.o == task.lamp and here and not lamp_at and places:
            lamp_at = here
            steps.append(f"go to {here} and use {act.obj}")
    if not places:
        return None
    where = f"the {task.obj} was in {' and '.join(places)}" + (f", the {task.lamp} at {lamp_at}" if lamp_at else "")
    return f"{GAME_LINE_PREFIX} {where}: " + ", then ".join(steps) + "."


def _station(task: AlfTask, *trajs: Traj) -> str:
    verb = task.transform or ""
    for traj in trajs:
        for step in traj.steps:
            act = parse_action(step.action)
            if act.verb == verb and not step.invalid:
                return act.r
    return _STATION.get(verb, "")


def required_order(task: AlfTask, station: str) -> str | None:
    """The sub-goal order every task of this type needs, from the task template."""
    o, r = task.obj, task.recep
    if task.transform:
        return f"take the {o} -> {task.transform} it with the {station} -> move it to the {r}"
    if task.task_type == "pick_two_obj_and_place":
        return f"take a {o} -> move it to the {r} -> take a second {o} -> move it to the {r}"
    if task.task_type == "look_at_obj_in_light":
        return (f"take the {o} -> go to the {task.lamp} -> use the {task.lamp} while holding the {o} (a "
                f"{task.lamp} switched on earlier also counts once you stand at it holding the {o})")
    if task.task_type == "pick_and_place_simple":
        return f"take the {o} -> move it to the {r}"
    return None


def _type_phrase(task: AlfTask) -> str:
    names = {"pick_clean_then_place_in_recep": "clean-X-then-put-in-Y", "pick_heat_then_place_in_recep":
             "heat-X-then-put-in-Y", "pick_cool_then_place_in_recep": "cool-X-then-put-in-Y",
             "pick_two_obj_and_place": "put-two-X-in-Y", "look_at_obj_in_light": "look-at-X-under-a-lamp",
             "pick_and_place_simple": "put-X-in-Y"}
    return names.get(task.task_type, "this")


def procedure(task: AlfTask, traj: Traj) -> str:
    """The success's compact procedure: search collapsed, detours and useless actions dropped."""
    rep = replay(traj)
    parts: list[str] = []
    nav: list[Act] = []
    held: str | None = None
    for _, act in rep.useful:
        if act.verb not in _MILESTONES:
            nav.append(act)
            continue
        held = act.o if act.verb == "take" else None if act.verb == "move" else held
        gos = [a.r for a in nav if a.verb == "go"]
        opened = [a.r for a in nav if a.verb == "open"]
        if act.verb == "take" and len(gos) > 1:
            text = (f"find the {act.o} by checking receptacles in turn (here: {join_list(gos, limit=5)}; open "
                    f"closed ones) and take the {act.o} from the {act.r} where you see it")
        else:
            where = act.r if act.verb != "use" else (gos[-1] if gos else "")
            text = phrase(act)
            if act.verb == "use" and held:
                text += f" while holding the {held}"
            if gos:
                opening = ", open it" if where in opened else ""
                text = f"go to the {gos[-1]}{opening} and {text}"
        parts.append(text)
        nav = []
    if not parts:
        parts = [phrase(a) for _, a in rep.useful] or [phrase(parse_action(a)) for a in traj.actions]
    steps = "; ".join(f"{i + 1}) {p}" for i, p in enumerate(parts))
    return f"Procedure for {_type_phrase(task)} tasks (e.g. '{task.text}'): {steps}."


def requirement_issues(task: AlfTask, traj: Traj, station: str) -> list[str]:
    """Sub-goals of the task type that the trajectory missed or did in the wrong order."""
    if task.obj is None:
        return []
    rep = replay(traj)
    o, r, verb = task.obj, task.recep, task.transform
    takes = [i for i, a in rep.milestones if a.verb == "take" and a.o == o]
    transforms = [i for i, a in rep.milestones if verb and a.verb == verb and a.o == o]
    moves = [(i, a) for i, a in rep.milestones if a.verb == "move" and a.o == o]
    placed = [i for i, a in moves if a.r == r]
    issues: list[str] = []
    if not takes:
        others = [a.o for _, a in rep.milestones if a.verb == "take"]
        detour = f" (it took the {join_list(others, conj='and the')} instead)" if others else ""
        unseen = unvisited(traj, rep.visited)
        where = f", e.g. {join_list(unseen, limit=5)}" if unseen else ""
        issues.append(f"Never picked up a {o}{detour}: search the receptacles not yet checked{where}, "
                      f"opening closed ones, and take the {o} as soon as you see it.")
        return issues
    if verb:
        early = [i for i in placed if not transforms or i < transforms[0]]
        if early:
            issues.append(f"Moved the {o} to the {r} before it was {_PAST[verb]}: {verb} the {o} with the "
                          f"{station} first, then move it to the {r}.")
        elif not transforms:
            issues.append(f"Took the {o} but never {_PAST[verb]} it: go to the {station} and {verb} the {o} "
                          f"with the {station}, then move it to the {r}.")
    wrong = [a.r for _, a in moves if a.r != r]
    if r and wrong and not placed:
        issues.append(f"Moved the {o} to the {join_list(wrong, conj='and the')} instead of the {r}.")
    need = 2 if task.task_type == "pick_two_obj_and_place" else 1
    if r and len(placed) < need and not issues:
        if need == 2 and placed:
            issues.append(f"Only one {o} reached the {r}: after placing the first, find and take a second "
                          f"{o} (check other receptacles) and move it to the {r} too.")
        else:
            done = f"{_PAST[verb]} the {o}" if verb and transforms else f"took the {o}"
            issues.append(f"It {done} but never moved it to the {r}: go to the {r} (open it if closed) and "
                          f"move the {o} there.")
    if task.task_type == "look_at_obj_in_light" and not any(a.verb == "use" for _, a in rep.milestones):
        # Using the lamp first is fine too (the goal is holding the object where a switched-on lamp is).
        issues.append(f"Never used the {task.lamp}: carry the {o} to where the {task.lamp} is and use the "
                      f"{task.lamp} while holding it.")
    return issues


def unvisited(traj: Traj, visited: list[str]) -> list[str]:
    """Receptacle types listed in the initial observation that the agent never went to."""
    m = re.search(r"you see (.+?)\.(?:\s|$)", traj.initial_observation)
    if not m:
        return []
    names = [strip_instance(re.sub(r"^an? ", "", x.strip()))
             for x in re.split(r",\s*(?:and\s+)?|\s+and\s+", m.group(1))]
    seen = set(visited)
    return [n for n in dict.fromkeys(names) if n and n not in seen]


def waste_lines(traj: Traj) -> list[str]:
    """Invalid actions, loops and running out of steps, each a correction line."""
    rep = replay(traj)
    lines: list[str] = []
    invalid = [s for s in traj.steps if s.invalid]
    if invalid:
        reasons = list(dict.fromkeys(rep.invalid_reasons))[:2]
        lines.append(f"{len(invalid)} action(s) gave 'Nothing happens.' (invalid, state unchanged): "
                     + "; ".join(reasons) + ".")
    loop = find_loop(traj.steps)
    if loop:
        cycle = " -> ".join(phrase(parse_action(a)) for a in loop.cycle)
        lines.append(f"Stuck in a loop: repeated {cycle} {loop.repeats} times with the same result; after an "
                     "action gives the same observation twice, do something else (e.g. a receptacle not yet "
                     "visited).")
    if not traj.won and traj.steps:
        lines.append(f"Ran out of steps after {len(traj.steps)} actions, {rep.wasted} of them wasted on invalid, "
                     "repeated or look/inventory/examine actions.")
    return lines


def correction(task: AlfTask, traj: Traj) -> list[str]:
    station = _station(task, traj)
    lines = _found(task, traj) + requirement_issues(task, traj, station)
    order = required_order(task, station)
    if order:
        lines.append(f"For {_type_phrase(task)} tasks the required order is: {order}.")
    return lines + waste_lines(traj)


def _found(task: AlfTask, traj: Traj) -> list[str]:
    line = found_line(task, traj)
    return [line] if line else []


def local_procedure(task: AlfTask, traj: Traj) -> list[str]:
    rep = replay(traj)
    lines = _found(task, traj) + [procedure(task, traj)]
    order = required_order(task, _station(task, traj))
    if order:
        lines.append(f"Sub-goal order: {order}; objects are typed, so any numbered {task.obj} works.")
    if rep.wasted:
        lines.append(f"Solved in {len(traj.steps)} actions, {rep.wasted} unnecessary: skip look/inventory/examine, "
                     "repeated moves and anything that says 'Nothing happens.'.")
    return lines


def pair(task: AlfTask, success: Traj, failure: Traj) -> list[str]:
    """What distinguishes the success from the failure, then the success's procedure."""
    station = _station(task, success, failure)
    lines: list[str] = _found(task, success)
    s_miles = [phrase(a) for _, a in replay(success).milestones]
    f_miles = [phrase(a) for _, a in replay(failure).milestones]
    k = first_divergence(s_miles, f_miles)
    if k is not None and k < len(s_miles):
        after = f"after '{s_miles[k - 1]}', " if k > 0 else ""
        instead = f"the failed attempt did '{f_miles[k]}' instead" if k < len(f_miles) else \
            "the failed attempt never did it"
        lines.append(f"Key decision: {after}do '{s_miles[k]}' next (the successful attempt did); {instead}.")
    for issue in requirement_issues(task, failure, station)[:2]:
        lines.append(f"In the failed attempt: {issue[0].lower()}{issue[1:]}")
    if len(lines) == len(_found(task, success)):
        s_useful = [phrase(a) for _, a in replay(success).useful]
        f_useful = [phrase(a) for _, a in replay(failure).useful]
        d = first_divergence(s_useful, f_useful)
        if d is not None and d < len(s_useful):
            after = f"after '{s_useful[d - 1]}'" if d > 0 else "at the start"
            other = f"'{f_useful[d]}'" if d < len(f_useful) else "nothing more"
            lines.append(f"First divergence {after}: the success did '{s_useful[d]}', the failure {other}.")
    lines.append(procedure(task, success))
    # One waste note at most: a Local skill must fit the teacher prompt's budget (~256 policy tokens).
    lines.extend(waste_lines(failure)[:1])
    return lines


RULES = OfflineRules(parse_task=parse_task, pair=pair, local_procedure=local_procedure, correction=correction)
register_offline_rules("alfworld", RULES)
