"""Every official valid_unseen expert walkthrough wins through the adapter, run in parallel in an EnvPool."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from skillduet_plugin.envs import make
from skillduet_plugin.envs.pool import EnvPool

pytest.importorskip("alfworld")


@pytest.mark.slow
def test_all_134_valid_unseen_walkthroughs_win(alfworld_real_data):
    env = make("alfworld", data_dir=alfworld_real_data, split="valid_unseen")
    tasks = env.tasks
    walkthroughs = [env.walkthrough(t) for t in tasks]
    assert len(tasks) == 134 and all(3 <= len(w) <= 9 for w in walkthroughs)
    won_by_type: Counter = Counter()
    started = time.monotonic()
    env_kwargs = {"data_dir": str(alfworld_real_data), "split": "valid_unseen"}
    with EnvPool("alfworld", num_workers=2, env_kwargs=env_kwargs) as pool:
        chunk = 34  # bounded env instances per worker (17 each)
        for lo in range(0, len(tasks), chunk):
            batch, plans = tasks[lo:lo + chunk], walkthroughs[lo:lo + chunk]
            results = pool.reset(batch)
            assert [r.error for r in results] == [None] * len(batch)
            assert all(r.info["task_id"] == t for r, t in zip(results, batch))
            for step in range(max(map(len, plans))):
                live = [k for k, plan in enumerate(plans) if step < len(plan)]
                results = pool.step(live, [plans[k][step] for k in live])
                for k, r in zip(live, results):
                    last = step == len(plans[k]) - 1
                    assert r.error is None, (batch[k], r.error)
                    assert r.obs != "Nothing happens.", (batch[k], plans[k][step])
                    assert (r.done, r.info["won"], r.reward) == (last, last, 1.0 if last else 0.0), batch[k]
                    if last:
                        won_by_type[r.info["task_type"]] += 1
    assert won_by_type == {"pick": 24, "look": 18, "clean": 31, "heat": 23, "cool": 21, "pick2": 17}
    assert time.monotonic() - started < 600
