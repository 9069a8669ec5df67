"""EnvPool: parallel episodes in worker processes; crashing and hanging workers end episodes, not the run."""

from __future__ import annotations

import os

import pytest

from skillduet_plugin.envs import ENVS, register_env
from skillduet_plugin.envs.pool import EnvPool, StepResult

FAKE = f"{__name__.rpartition('.')[0] + '.' if '.' in __name__ else ''}pool_fakes:make_crashy"


@pytest.fixture(autouse=True)
def crashy_registered():
    register_env("crashy", FAKE)
    yield
    ENVS.unregister("crashy")


def test_in_process_pool_runs_episodes_in_order():
    with EnvPool("crashy", num_workers=0, env_kwargs={"max_steps": 3}) as pool:
        first = pool.reset(["a", "b", "a"])
        assert [r.obs for r in first] == ["start a", "start b", "start a"]
        assert all(isinstance(r, StepResult) and r.error is None and not r.done for r in first)
        res = pool.step([2, 0], ["noop", "win"])
        assert res[0].obs == "a step 1: noop" and res[0].reward == 0.0 and not res[0].done
        assert res[1].obs == "a step 1: win" and res[1].reward == 1.0 and res[1].done and res[1].info["won"]
        # episode 1 untouched so far, then the step limit of 3 ends it
        for n in (1, 2, 3):
            (r,) = pool.step([1], ["noop"])
            assert r.obs == f"b step {n}: noop"
        assert r.done and not r.info["won"]


def test_in_process_env_exception_fails_only_that_episode():
    with EnvPool("crashy", num_workers=0) as pool:
        pool.reset(["a", "b"])
        bad, good = pool.step([0, 1], ["raise", "noop"])
        assert bad.done and bad.reward == 0.0 and bad.info["won"] is False
        assert "ValueError: boom" in bad.error and bad.info["task"] == "do a"
        assert good.error is None and good.obs == "b step 1: noop"
        (again,) = pool.step([0], ["noop"])
        assert again.done and again.error == bad.error


def test_worker_pool_spreads_episodes_and_keeps_order():
    with EnvPool("crashy", num_workers=2) as pool:
        res = pool.reset(["t0", "t1", "t2", "t3"])
        pids = [r.info["pid"] for r in res]
        # contiguous blocks: episodes 0,1 on one worker, 2,3 on the other
        assert pids[0] == pids[1] != pids[2] == pids[3] and os.getpid() not in pids
        res = pool.step([3, 0, 2], ["noop", "noop", "win"])
        assert [r.obs for r in res] == ["t3 step 1: noop", "t0 step 1: noop", "t2 step 1: win"]
        assert [r.done for r in res] == [False, False, True]


def test_crashing_worker_is_restarted_and_its_episodes_fail():
    with EnvPool("crashy", num_workers=2, step_timeout_s=30) as pool:
        before = [r.info["pid"] for r in pool.reset(["t0", "t1", "t2", "t3"])]
        res = pool.step([0, 2, 3], ["crash", "noop", "noop"])
        crashed = res[0]
        assert crashed.done and crashed.reward == 0.0 and crashed.info["won"] is False
        assert crashed.error.startswith("worker crashed: exit code 3")
        assert [r.obs for r in res[1:]] == ["t2 step 1: noop", "t3 step 1: noop"]
        # episode 1 lived on the crashed worker: it is reported failed on its next step
        (lost,) = pool.step([1], ["noop"])
        assert lost.done and lost.error.startswith("worker crashed") and lost.info["task_id"] == "t1"
        assert pool.restarts == 1
        after = [r.info["pid"] for r in pool.reset(["t0", "t1", "t2", "t3"])]
        assert after[2:] == before[2:] and after[0] not in before  # a fresh process serves the first block
        assert [r.error for r in pool.step([0, 1], ["noop", "noop"])] == [None, None]


def test_crash_during_reset_is_reported():
    with EnvPool("crashy", num_workers=1) as pool:
        res = pool.reset(["crash_on_reset", "t1"])
        assert res[0].error == "worker crashed: exit code 7" and res[0].done
        assert res[1].error == "worker crashed: exit code 7"  # same worker, never got to run
        assert [r.error for r in pool.reset(["t1"])] == [None]


def test_hanging_worker_times_out_and_is_replaced():
    with EnvPool("crashy", num_workers=2, step_timeout_s=1.0) as pool:
        pool.reset(["t0", "t1"])
        hung, fine = pool.step([0, 1], ["hang", "noop"])
        assert hung.done and hung.error == "step timed out after 1s" and hung.info["won"] is False
        assert fine.error is None and fine.obs == "t1 step 1: noop"
        assert pool.restarts == 1
        assert [r.error for r in pool.reset(["t0", "t1"])] == [None, None]


def test_bad_arguments_are_rejected():
    with EnvPool("crashy", num_workers=0) as pool:
        pool.reset(["a", "b"])
        with pytest.raises(IndexError, match="outside this batch"):
            pool.step([5], ["noop"])
        with pytest.raises(ValueError, match="duplicates"):
            pool.step([0, 0], ["noop", "noop"])
        with pytest.raises(ValueError, match="actions"):
            pool.step([0, 1], ["noop"])
    with pytest.raises(KeyError, match="env='no-such-env' is invalid: registered environments are alfworld, "):
        EnvPool("no-such-env")
    with pytest.raises(RuntimeError, match="closed"):
        pool.reset(["a"])


def test_alfworld_group_rollouts_in_a_worker(alfworld_generated):
    pytest.importorskip("alfworld")
    kwargs = {"data_dir": str(alfworld_generated), "split": "train"}
    from skillduet_plugin.envs import make

    task = make("alfworld", **kwargs).tasks[0]
    plan = make("alfworld", **kwargs).walkthrough(task)
    with EnvPool("alfworld", num_workers=1, env_kwargs=kwargs) as pool:
        group = pool.reset([task] * 3)  # a GRPO group: three episodes of one game
        assert len({r.obs for r in group}) == 1 and group[0].info["task_id"] == task
        res = pool.step([0, 1, 2], [plan[0], "look", "jump"])
        assert res[0].obs.startswith("You arrive at") and res[2].obs == "Nothing happens."
        assert res[1].obs.startswith("You are in the middle of a room.")
        for command in plan[1:]:
            (r,) = pool.step([0], [command])
        assert r.done and r.info["won"] and r.reward == 1.0
        (r1,) = pool.step([1], ["inventory"])  # the other members kept their own state
        assert r1.obs == "You are not carrying anything." and not r1.done
