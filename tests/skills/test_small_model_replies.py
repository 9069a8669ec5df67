"""Parsing of replies a small real analyzer/synthesizer gave: SmolLM2-135M-Instruct on `vllm serve`, answering the
shipped prompts (temperature 0.3, 96-token budget). It ignores the answer tags, copies the rendered trajectory
back and repeats its last sentence; what reaches the bank must be the advice, each line once, or nothing."""

from __future__ import annotations

from skillduet_plugin.skills.consolidate import clean_items
from skillduet_plugin.skills.judge import judge_skill_reply, parse_global_answer, parse_skill_answer
from skillduet_plugin.skills.sanitize import sanitize_skill

# local_pair: the user message copied back verbatim (cut at the token budget)
ECHO = ("Task: clean the t2 knife and put it in drawer.\n\n## Successful attempt\nStep 1. Action: go to sink s2\n"
        "Observation: obs after go to sink s2\nStep 2. Action: take knife s2\nObservation: obs after take knife s2\n"
        "Outcome: success (reward 1)\n\n## Failed attempt\nStep 1. Action: go to sink s2\nObservation: obs after")
# local_procedure: the trajectory copied, then one sentence of its own
PROCEDURE = ("Step 1. Action: take knife a1\nObservation: obs after take knife a1\nStep 2. Action: put knife a1 in "
             "drawer\nObservation: obs after put knife a1 in drawer\nOutcome: success (reward 1)\n\nThe previous "
             "example was not a success, but the next example was.\n\nThe next example was a success.")
# local_correction: one sentence repeated until the budget ran out
REPEATED = ('The error is: "The task is to clean the knife, not to clean the knife."\n\nThe correction skill is: '
            '"The task is to clean the knife, not to clean the knife."\n\nThe correction skill is: "The task is to '
            'clean the knife, not to clean the knife."')
# synthesize: markdown headings instead of "- " items and <global> tags, items repeated
SYNTH = ("### New skill set\n### Skill 3\nTake the knife before going to the sink.\n\n### Skill 4\nClean the knife "
         "there.\n\n### Skill 5\nTake the knife before going to the sink.\n\n### Skill 6\nClean the knife there.\n\n"
         "### Skill 7\nClean the knife there.")


def test_an_echoed_trajectory_is_not_a_skill():
    assert parse_skill_answer(ECHO) == ""
    assert judge_skill_reply(ECHO).reason == "prompt_structure"
    # negative control: before the echo filter the copied trajectory passed as a "skill"
    assert sanitize_skill(ECHO, 2000)[0] is not None


def test_the_models_talk_about_the_examples_is_not_advice_either():
    verdict = judge_skill_reply(PROCEDURE)
    assert verdict.text is None and verdict.reason == "prompt_structure"
    assert ("chatter", "The previous example was not a success, but the next example was.") in verdict.dropped


def test_repeated_lines_are_judged_once():
    verdict = judge_skill_reply(REPEATED, task="clean the knife and put it in drawer.")
    assert verdict.text is None and verdict.reason == "chatter"
    assert len(verdict.dropped) == 2  # "The error is: ..." and "The correction skill is: ..." once each


def test_the_prompts_structure_inside_the_tags_is_never_a_skill_line():
    tagged = "Sure.\n<skill>\nStep 1. Action: go to sink\nOpen the drawer first.\n</skill>"
    assert parse_skill_answer(tagged) == "Open the drawer first."


def test_headings_are_not_global_items():
    items = parse_global_answer(SYNTH)
    assert not any(i.startswith("#") for i in items)
    assert clean_items(items, 2000) == ["Take the knife before going to the sink.", "Clean the knife there."]
    # bullets inside tags still win, headings beside them ignored
    assert parse_global_answer("<global>\n### Skills\n- Open it.\n- Close it.\n</global>") == ["Open it.", "Close it."]


def test_the_prompts_answer_form_example_copied_back_is_dropped():
    copied = "<skill>\n- (first thing to do or check)\n- (next thing to do)\n</skill>"
    assert judge_skill_reply(copied).reason == "prompt_structure"
    mixed = "<skill>\n- (first thing to do or check)\n- Go to the sink before you take the knife.\n</skill>"
    assert parse_skill_answer(mixed) == "- Go to the sink before you take the knife."
    form = "<global>\n- (most important item)\n- Open it.\n- (next item)\n</global>"
    assert parse_global_answer(form) == ["Open it."]
    assert parse_global_answer("<global>\n- first item\n</global>") == ["first item"]  # only the form's own words


# local_correction replies of the `skillduet train` run against the server (ALFWorld, step 1): the initial
# observation and the task line copied back, the first with its list garbled
OBSERVATION = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a desk 1, a drawer "
               "1, a drawer 2, a dresser 1, and a sinkbasin 1.")
PROMPT = (f"Task: put some plate on dresser.\n\n## Failed attempt\nInitial observation: {OBSERVATION}\n\nYour task "
          "is to: put some plate on dresser.\nStep 1. Action: go to desk 1\nObservation: On the desk 1, you see a "
          "pen 1.\nOutcome: failure (reward 0)")
COPIED = [
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a desk 1, a drawer 1, a "
    "drawer 2, a drawer 1, a dresser 1, and a sinkbasin 1.\n\nYour task is to put some plate on dresser.",
    "You are in the middle of a room. Looking quickly around you, you see a coffee.\n\nYou are in the middle of a "
    "room. Looking quickly around you, you see a bread.\n\nYou are in the middle of a room. Looking quickly around",
]


def test_lines_copied_from_the_prompt_are_not_a_skill():
    for reply in COPIED:
        assert sanitize_skill(parse_skill_answer(reply, PROMPT), 2000)[0] is None
        assert sanitize_skill(parse_skill_answer(reply), 2000)[0] is not None  # negative control: no prompt given
    own = "Check the dresser before you go to the desk.\nYou are in the middle of a room. Looking quickly around"
    assert parse_skill_answer(own, PROMPT) == "Check the dresser before you go to the desk."
    # a copy with small edits is a copy (word pairs, not an 8-word prefix); the task said again is not advice
    assert judge_skill_reply("- Looking around you, you see a cabinet 1 and a desk 1.", PROMPT).reason == (
        "copied_transcript")
    assert judge_skill_reply("Put the plate on the dresser.", PROMPT, task="put some plate on dresser.").reason == (
        "task_restated")
    # naming the actions the attempt took is advice, not a copy
    assert parse_skill_answer("Go to the desk 1 first, then look for the plate.", PROMPT) == (
        "Go to the desk 1 first, then look for the plate.")


def test_copied_lines_are_dropped_for_language_models_only():
    from skillduet_plugin.skills.extract import extract_local
    from skills_fakes import FakeBackend, make_traj

    trajs = [make_traj("f1", actions=["go to desk 1", "open drawer 1"])]
    # a sentence of the correction prompt's own instructions, copied back
    quoting = "<skill>\nFind the first decisive mistake and write one reusable correction skill.\n</skill>"
    llm = FakeBackend(lambda p: quoting)
    result = extract_local(trajs, 1, llm, max_chars=2000)[0]
    assert result.skills == [] and [r for r, _ in result.rejected] == ["copied_transcript"]
    rules = FakeBackend(lambda p: quoting)
    rules.may_copy_prompt = False  # like the offline backend, which quotes trajectories on purpose
    assert [s.text for s in extract_local(trajs, 1, rules, max_chars=2000)[0].skills] == [
        "Find the first decisive mistake and write one reusable correction skill."]
