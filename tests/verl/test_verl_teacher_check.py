"""The teacher check on verl (``skillduet.teacher_check_samples``): the trainer plays the step's tasks that got a
Local skill with and without it against the rollout server (a fake client here; a real ``fit()`` in
``test_real_fit.py``), through the agent loop's episode code, and logs TRL's metric names from the shared core."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from fakes import HINDSIGHT_HEADER  # noqa: E402

from skillduet_plugin.core.conversation import ChatTokenizer  # noqa: E402
from skillduet_plugin.rollout.teacher_check import CHECK_METRICS  # noqa: E402
from skillduet_plugin.skills.inject import LOCAL_HEADER, insert_sections  # noqa: E402
from skillduet_plugin.skills.types import Skill  # noqa: E402


class CheckLifecycle:
    """The lifecycle surface the check uses (no Global: the Local-only setting)."""

    config = SimpleNamespace(use_global=False, scope="task_type")

    def teacher_messages(self, prompt_messages, *, task, scope, local_skill, global_version=None):
        return insert_sections(prompt_messages, [f"{LOCAL_HEADER}\n{local_skill.text}"], task=task)

    def global_for(self, scope):
        return SimpleNamespace(version=None)


class SkillReader:
    """A rollout server whose policy opens the box only when a Local skill is in its prompt (``reads_skill``)."""

    def __init__(self, tokenizer, reads_skill=True):
        self.tokenizer, self.reads_skill, self.params = tokenizer, reads_skill, []

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        self.params.append(dict(sampling_params))
        skilled = HINDSIGHT_HEADER in self.tokenizer.decode(prompt_ids) and self.reads_skill
        text = "<action>open box</action>" if skilled else "<action>look</action>"
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return SimpleNamespace(token_ids=ids, log_probs=[-0.1] * len(ids), extra_fields={"global_steps": 3})


def _trainer(tiny_tokenizer, tmp_path, client, samples=2):
    from skillduet_plugin.integrations.verl.settings import parse_settings
    from skillduet_plugin.integrations.verl.trainer import SkillDuetTrainer
    from skillduet_plugin.main_ppo import compose

    cfg = compose(["trainer.plugins=[skillduet]", f"trainer.default_local_dir={tmp_path}", "skillduet.env.name=toy",
                   f"skillduet.teacher_check_samples={samples}", "skillduet.use_global=false",
                   "actor_rollout_ref.rollout.response_length=256"])
    trainer = SkillDuetTrainer.__new__(SkillDuetTrainer)
    trainer.config, trainer.skillduet = cfg, parse_settings(cfg.skillduet)
    trainer.chat, trainer.lifecycle = ChatTokenizer(tiny_tokenizer), CheckLifecycle()
    trainer.global_steps, trainer._server_client = 3, client
    # rows 0 and 2 hold toy-0 ("open the box"), row 1 toy-3; only toy-0's rows got a Local skill
    trainer._trajectories = [(0, SimpleNamespace(task_id="toy-0")), (1, SimpleNamespace(task_id="toy-3")),
                             (2, SimpleNamespace(task_id="toy-0"))]
    skill = Skill(text="- Procedure: open the box.", scope="open", kind="procedure", step=3)
    plan = SimpleNamespace(skills=[skill, None, skill, None])  # row 3: verl's padding row
    return trainer, plan


def test_teacher_check_plays_with_and_without_the_local_skill(tiny_tokenizer, tmp_path):
    client = SkillReader(tiny_tokenizer)
    trainer, plan = _trainer(tiny_tokenizer, tmp_path, client)
    assert trainer._teacher_check_on()
    metrics = {}
    trainer._teacher_check(plan, {"toy-0": "train"}, metrics)
    # toy-0 twice as the teacher (wins: the skill is read) and twice as the student (looks around, loses)
    assert metrics == {CHECK_METRICS[0]: 1.0, CHECK_METRICS[1]: 0.0, CHECK_METRICS[2]: 1.0}
    seeds = {p["seed"] for p in client.params}
    assert len(seeds) == 4  # one seed per episode, shared by its turns
    # the training rollouts' sampling settings, plus the seed
    assert {p["temperature"] for p in client.params} == {float(trainer.config.actor_rollout_ref.rollout.temperature)}
    again = SkillReader(tiny_tokenizer)
    trainer._server_client = again
    trainer._teacher_check(plan, {"toy-0": "train"}, {})
    assert {p["seed"] for p in again.params} == seeds  # deterministic per (data.seed, step)


def test_teacher_check_negative_control_policy_ignoring_the_skill(tiny_tokenizer, tmp_path):
    """A policy that does not read the skill gives no difference: the metric measures the skill's effect."""
    trainer, plan = _trainer(tiny_tokenizer, tmp_path, SkillReader(tiny_tokenizer, reads_skill=False))
    metrics = {}
    trainer._teacher_check(plan, {"toy-0": "train"}, metrics)
    assert metrics[CHECK_METRICS[2]] == 0.0 and metrics[CHECK_METRICS[0]] == 0.0


def test_teacher_check_off_and_validated(tiny_tokenizer, tmp_path):
    from skillduet_plugin.core.settings import ConfigError
    from skillduet_plugin.integrations.verl.settings import parse_settings

    trainer, _ = _trainer(tiny_tokenizer, tmp_path, None, samples=0)
    assert not trainer._teacher_check_on()
    with pytest.raises(ConfigError, match=r"^skillduet\.teacher_check_samples=-1 is invalid"):
        parse_settings({"teacher_check_samples": -1})


def test_verl_metrics_plot_with_the_trl_plot(tmp_path):
    """verl's file-logger lines carry the check under TRL's names, so the run plot draws them unchanged."""
    from skillduet_plugin.runs.plots import TEACHER_CHECK_KEYS, plot_mechanism, series

    assert set(TEACHER_CHECK_KEYS) <= set(CHECK_METRICS)
    records = [{"step": s, CHECK_METRICS[0]: 0.5 + 0.1 * s, CHECK_METRICS[1]: 0.5, CHECK_METRICS[2]: 0.1 * s}
               for s in (1, 2)]
    assert series(records, CHECK_METRICS[0]) == ([1, 2], [0.6, 0.7])
    assert plot_mechanism(records, None, tmp_path / "mechanism.png").stat().st_size > 0
