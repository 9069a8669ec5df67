"""verl's real ``main_ppo`` / ``fit()`` on CPU (test-only rollout backend), stock and with the SkillDuet plugin.

Every assertion reads what verl itself wrote: its file logger's per-step metrics, its checkpoint folders and
the process exit code. The three runs share one file so CI's ``--dist loadfile`` keeps them on one worker.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("ray")
pytest.importorskip("transfer_queue")

from skillduet_testing.tracker_files import (tensorboard_scalars, tensorboard_texts,  # noqa: E402
                                             wandb_history, wandb_media, wandb_offline_runs)
from skillduet_testing.verl_cpu_run import joined_ray_log, read_metrics, run  # noqa: E402
from skillduet_testing.verl_rollout import SKIP_SYNC_ENV  # noqa: E402

GAP = "training/rollout_probs_diff_max"  # verl's max |p_rollout - p_actor| over the step's response tokens
TRACKERS = "trainer.logger=[console,file,tensorboard]"
RUN_TIMEOUT = 1400  # a 3-step fit takes ~3 min idle; at load 5+ from other jobs 900 s was seen to run out


def assert_rollout_synced(metrics: dict[int, dict], steps) -> None:
    """The rollout server generated with the actor's weights: verl's rollout-vs-actor gap is float noise."""
    for step in steps:
        assert metrics[step]["training/rollout_probs_diff_valid"] == 1.0, step
        assert metrics[step][GAP] < 1e-6, f"step {step}: rollout-vs-actor gap {metrics[step][GAP]:.3g}"


def assert_server_logprobs_match(m: dict, step: int) -> None:
    """teacher_logprobs=compare: the rollout server's teacher/scoring rows, the step's OPD loss and Strength
    equal the actor-computed ones within 1e-5."""
    for key in ("logprob_max_abs_diff", "opd_loss_abs_diff", "strength_abs_diff", "utility_abs_diff"):
        assert m[f"skillduet/check/{key}"] < 1e-5, (step, key, m[f"skillduet/check/{key}"])
    assert m["skillduet/check/scored_both"] >= 1, step  # Strength was compared on at least one candidate
    assert m["skillduet/check/opd_loss_actor"] != 0.0, step  # the loss compared is not an empty sum


def _tail(path: Path, n: int = 6000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def _fit(out: Path, name: str, **kwargs) -> dict[int, dict]:
    """One ``main_ppo`` process to completion; its per-step metrics from verl's file logger."""
    metrics, log = out / f"{name}.jsonl", out / f"{name}.log"
    code = run(out, metrics=str(metrics), log=str(log), timeout=RUN_TIMEOUT, **kwargs)
    assert code == 0, f"{name} exited {code}:\n{_tail(log)}"
    return read_metrics(metrics)


@pytest.mark.slow
def test_stock_main_ppo_fit_and_weight_sync_negative_control(tmp_path):
    """Stock verl (no plugin), 3 GRPO steps; the weight sync after step 2 is skipped on purpose, so step 2
    shows the synced gap and step 3 the stale one (the gap assertion can fail)."""
    metrics = _fit(tmp_path, "stock", stock=True, steps=3, save_freq=-1, overrides=[TRACKERS],
                   extra_env={SKIP_SYNC_ENV: "2", "TENSORBOARD_DIR": str(tmp_path / "tb")})
    assert sorted(metrics) == [1, 2, 3]
    assert not any(k.startswith("skillduet/") for m in metrics.values() for k in m)
    # negative control of the tracker test below: verl's event file is read (its scalars), no skill text in it
    assert set(tensorboard_scalars(tmp_path / "tb")["actor/pg_loss"]) == {1, 2, 3}
    assert not [tag for tag in tensorboard_texts(tmp_path / "tb") if tag.startswith("skillduet_skills/")]
    assert_rollout_synced(metrics, [1, 2])
    assert metrics[3][GAP] > 1e-5, "skipping the sync should leave the rollout on stale weights"
    with pytest.raises(AssertionError, match="gap"):
        assert_rollout_synced(metrics, [3])
    for m in metrics.values():
        assert math.isfinite(m["actor/pg_loss"]) and m["timing_s/step"] > 0


def rollback_live_bank(ckpt: Path, step: int) -> None:
    """The live bank of a run's checkpoint folder set back to the bank saved at ``step``."""
    live = ckpt / "skillduet" / "bank.sqlite"
    for extra in live.parent.glob("bank.sqlite-*"):
        extra.unlink()
    live.write_bytes(next((ckpt / f"global_step_{step}" / "skillduet" / "bank").glob("*.sqlite")).read_bytes())


def _bank_globals(bank_dir: Path) -> dict[str, list[tuple[int, str]]]:
    from skillduet_plugin.skills.bank import SkillBank

    bank = SkillBank(next(bank_dir.glob("*.sqlite")), readonly=True)
    try:
        return {s: [(v.version, v.text) for v in bank.history(s)] for s in bank.scopes()}
    finally:
        bank.close()


def assert_skills_in_trackers(out: Path, bank_dir: Path, steps: set[int]) -> None:
    """verl's own TensorBoard writer and W&B run (offline) hold each step's ranked Local skills and each Global
    version, at the step that made it; the console got the Global panels."""
    from skillduet_plugin.skills.bank import SkillBank

    bank = SkillBank(next(bank_dir.glob("*.sqlite")), readonly=True)
    try:
        versions = bank.history()
    finally:
        bank.close()
    assert {v.step for v in versions} == steps  # consolidation_interval=1
    texts = tensorboard_texts(out / "tb")
    assert set(texts["skillduet_skills/local_ranked"]) == steps
    assert all(texts["skillduet_skills/local_ranked"][s].startswith("| rank | end | strength") for s in steps)
    for v in versions:
        panel = texts[f"skillduet_skills/global/{v.scope}"][v.step]
        assert f"v{v.version}" in panel and all(line in panel for line in v.text.splitlines()), (v.scope, v.step)
        assert "| kept |" in texts[f"skillduet_skills/consolidation/{v.scope}"][v.step]
    (run_dir,) = wandb_offline_runs(out / "wb")
    rows = wandb_history(run_dir)
    local = [r for r in rows if r.get("skillduet_skills/local_ranked/_type") == "table-file"]
    assert {r["_step"] for r in local} == steps  # logged with verl's step
    assert wandb_media(run_dir, {"path": local[0]["skillduet_skills/local_ranked/path"]})["data"]
    assert "[skillduet_skills/global/" in (out / "skillduet.log").read_text()


@pytest.mark.slow
def test_skillduet_fit_checkpoints_and_resume(tmp_path):
    """trainer.plugins=[skillduet] on generated ALFWorld games: 2 steps checkpointed every step, then a resume
    for step 3 that starts from the checkpoint's bank and Global (the live bank is rolled back first, so only
    a real restore passes).

    Steps 1-2 run with ``skillduet.teacher_logprobs=compare``: teacher and scoring rows come from prefill
    requests to the rollout server (the teacher rows per task group, sent while sampling), and each step also
    computes them with the actor and logs the gaps (log-probs, the step's OPD loss, Strength); the resumed
    step 3 runs the default actor path."""
    trackers = {"TENSORBOARD_DIR": str(tmp_path / "tb"), "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wb"),
                "WANDB_SILENT": "true"}
    (tmp_path / "wb").mkdir()
    metrics = _fit(tmp_path, "skillduet", steps=2, save_freq=1, extra_env=trackers,
                   overrides=["skillduet.teacher_logprobs=compare", "trainer.logger=[console,file,tensorboard,wandb]"])
    assert sorted(metrics) == [1, 2]
    for step, m in metrics.items():
        assert m["skillduet/local_skills"] > 0, step
        assert m["skillduet/trajectories"] == 8, step
        assert math.isfinite(m["actor/skillduet/opd_loss"]), step
        assert 0.0 < m["actor/skillduet/opd/gate_active_ratio"] < 1.0, step
        assert m["skillduet/skills/global_scopes"] >= 1, step  # consolidation_interval=1
        assert_server_logprobs_match(m, step)
        # the teacher prefills went out per task group from the replay buffer's polls, not with the batch
        assert m["skillduet/groups_prefetched"] >= 1 and m["skillduet/teacher_rows_prefetched"] >= 1, step
    assert metrics[1]["skillduet/rollout_global_version"] == -1  # nothing consolidated before step 1
    assert metrics[2]["skillduet/rollout_global_version"] >= 1  # step 1's Global was in step 2's prompts
    assert_rollout_synced(metrics, [2])
    for phase in ("skillduet_extract", "skillduet_teacher", "skillduet_score", "skillduet_end_step"):
        assert f"timing_s/{phase}" in metrics[2], phase  # each phase is timed in verl's own timing_s/ group

    ckpt = tmp_path / "checkpoints"
    saved = {}
    for step in (1, 2):
        folder = ckpt / f"global_step_{step}" / "skillduet"
        state = json.loads((folder / "verl_state.json").read_text())
        assert state["global_steps"] == step and state["end_step_done"] is True and state["scopes"]
        saved[step] = _bank_globals(folder / "bank")
        assert saved[step] and all(saved[step].values())
    assert saved[1] != saved[2]
    assert_skills_in_trackers(tmp_path, ckpt / "global_step_2" / "skillduet" / "bank", steps={1, 2})

    rollback_live_bank(ckpt, 1)  # a resume that did not restore step 2's bank would use step 1's

    resumed = _fit(tmp_path, "resumed", steps=3, save_freq=1)
    assert sorted(resumed) == [3]
    newest = max(v for versions in saved[2].values() for v, _ in versions)
    assert resumed[3]["skillduet/rollout_global_version"] == newest
    assert resumed[3]["skillduet/local_skills"] > 0 and math.isfinite(resumed[3]["actor/skillduet/opd_loss"])
    assert not any(k.startswith("skillduet/check/") for k in resumed[3])  # the default: actor log-probs only
    assert_rollout_synced(resumed, [3])
    after = _bank_globals(ckpt / "global_step_3" / "skillduet" / "bank")
    for scope, versions in saved[2].items():  # step 3 only appended to the checkpoint's history
        assert after[scope][: len(versions)] == versions, scope


@pytest.mark.slow
def test_stock_verl_entry_with_the_plugin_override(tmp_path):
    """Stock ``python -m verl.trainer.main_ppo`` with ``+trainer.plugins=[skillduet]``: the ``verl.plugins`` entry
    point switches the run to SkillDuet (the skillduet_sync trainer, the skillduet_agent loop, the ``skillduet:``
    section from the defaults) and ``+skillduet.opd_coef`` reaches the loss. The stock run above (no plugin)
    is the negative control: it logs no ``skillduet/*`` metric."""
    metrics = _fit(tmp_path, "stock_entry", steps=1, save_freq=-1, entry="verl.trainer.main_ppo",
                   overrides=["skillduet.opd_coef=0.25"])
    log = (tmp_path / "stock_entry.log").read_text(errors="replace")
    assert " -m verl.trainer.main_ppo " in log.splitlines()[0] and "+trainer.plugins=[skillduet]" in log
    m = metrics[1]
    assert m["skillduet/local_skills"] > 0 and m["skillduet/trajectories"] == 8
    assert math.isfinite(m["actor/skillduet/opd_loss"]) and m["skillduet/skills/global_scopes"] >= 1
    # the whole section, defaults under the override, as verl's TaskRunner printed the config it ran
    # (Ray prefixes each forwarded line with its actor and may split one printed line in two: joined first)
    flat = joined_ray_log(log)
    assert "'opd_coef': 0.25" in flat and "'gate_beta': 5.0" in flat and "'trainer_mode': 'skillduet_sync'" in flat
    assert (tmp_path / "checkpoints" / "skillduet" / "bank.sqlite").is_file()
