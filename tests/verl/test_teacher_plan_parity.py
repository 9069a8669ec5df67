"""One teacher plan: the TRL and verl adapters plan the same step (the same episodes and extraction) identically,
through their own planning code (TRL: episodes -> trajectories -> plan; verl: the agent loop's records and token
tensors -> trajectories -> plan)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")
pytest.importorskip("trl")

from skillduet_plugin.config import SkillDuetConfig  # noqa: E402
from skillduet_plugin.core.conversation import ChatTokenizer  # noqa: E402
from skillduet_plugin.envs.toy import toy_initial_messages  # noqa: E402
from skillduet_plugin.integrations.trl.trainer import SkillDuetMixin  # noqa: E402
from skillduet_plugin.integrations.verl.batch import build_trajectories  # noqa: E402
from skillduet_plugin.integrations.verl.trainer import SkillDuetTrainer  # noqa: E402
from skillduet_plugin.rollout.engine import episode_from_record  # noqa: E402
from skillduet_plugin.skills.bank import BANK_FILENAME  # noqa: E402
from skillduet_plugin.skills.lifecycle import SkillLifecycle  # noqa: E402
from skillduet_plugin.skills.types import ExtractionResult, Skill  # noqa: E402

STEP = 3
# (task_id, scope, task, error): four rollouts of one step; the third one's environment failed
ROWS = [("toy-3", "fetch", "take the key from the box.", None), ("toy-3", "fetch", "take the key from the box.", None),
        ("toy-0", "open", "open the box.", "worker crashed"), ("toy-0", "open", "open the box.", None)]


def _records(chat):
    records, prompts, responses = [], [], []
    for i, (task_id, scope, task, error) in enumerate(ROWS):
        plain = toy_initial_messages("toy", task=task, observation="a room", admissible_actions=["look"])
        records.append({"task_id": task_id, "scope": scope, "task": task, "prompt_messages": plain,
                        "messages": plain, "won": i == 0, "error": error, "global_version": None,
                        "actions": ["look"], "observations": ["a room", "obs"], "num_turns": 1})
        prompts.append(torch.tensor(chat.prompt_ids(plain)))
        responses.append(torch.tensor(chat.encode(f"<action>look {i}</action>") + [chat.eos_token_id]))
    return records, prompts, responses


@pytest.mark.slow  # imports TRL and verl (most of its time)
def test_trl_and_verl_plan_the_same_step_identically(tiny_tokenizer, tmp_path):
    chat = ChatTokenizer(tiny_tokenizer)
    cfg = SkillDuetConfig()
    lifecycle = SkillLifecycle(cfg, tmp_path / BANK_FILENAME, tokenizer=tiny_tokenizer)
    records, prompts, responses = _records(chat)
    masks = [torch.ones_like(r) for r in responses]
    episodes = [episode_from_record(r, prompt_ids=p.tolist(), completion_ids=c.tolist(), completion_mask=m.tolist())
                for r, p, c, m in zip(records, prompts, responses, masks)]

    # TRL: this process's episodes -> trajectories (the adapter's own mapping) -> plan
    trl = SimpleNamespace(_episodes=episodes, skillduet=cfg, accelerator=SimpleNamespace(process_index=0),
                          lifecycle=lifecycle, chat=chat)
    output = {"advantages": torch.zeros(len(ROWS))}
    trl_trajs = SkillDuetMixin._trajectories(trl, output, STEP)
    shared = Skill(text="Open the box before taking the key.", scope="fetch", kind="shared")
    crashed = Skill(text="Look around first.", scope="open", kind="correction")
    empty = Skill(text="<|im_end|>", scope="open", kind="correction")  # renders to no section: not supervised
    ids = [t.traj_id for t in trl_trajs]
    extraction = ExtractionResult(skills=[shared, crashed, empty], assignment={
        ids[0]: shared.skill_id, ids[1]: shared.skill_id, ids[2]: crashed.skill_id, ids[3]: empty.skill_id})
    trl_plan = SkillDuetMixin._teacher_plan(trl, trl_trajs, extraction)

    # verl: the agent loop's records and token tensors, keyed by the same ids -> trajectories -> plan
    verl_trajs = build_trajectories(ids, records, prompts, responses, masks, None, step=STEP)
    verl = SimpleNamespace(_trajectories=verl_trajs, _extraction=extraction, lifecycle=lifecycle, chat=chat)
    verl_plan = SkillDuetTrainer._teacher_plan(verl, prompts, responses)

    assert trl_plan.has_skill == [True, True, False, False]  # a failed episode and an empty skill: no teacher
    for plan in (trl_plan, verl_plan):
        assert plan.contexts[2] == prompts[2].tolist() and plan.contexts[3] == prompts[3].tolist()
        assert plan.contexts[0] != prompts[0].tolist() and plan.responses == [r.tolist() for r in responses]
    assert verl_plan.contexts == trl_plan.contexts and verl_plan.responses == trl_plan.responses
    assert [s and s.skill_id for s in verl_plan.skills] == [s and s.skill_id for s in trl_plan.skills]
    assert [t.local_skill_id for t in trl_trajs] == [t.local_skill_id for _, t in verl_trajs] == \
        [shared.skill_id, shared.skill_id, None, None]
