"""The run recorder keeps each step's trajectories in the run directory, where ``skillduet score`` reads them."""

from __future__ import annotations

from types import SimpleNamespace

from skillduet_plugin.runs.recorder import RunRecorder
from skillduet_plugin.runs.rundir import MetricsWriter
from skillduet_plugin.skills.trajectory_io import load_trajectories, trajectory_file
from skillduet_plugin.skills.types import Trajectory


def test_step_trajectories_are_saved_and_reload(tmp_path):
    trajs = [Trajectory(traj_id=f"3-t{i}", task_id=f"t{i}", scope="clean", completion_ids=[5, 6, 2],
                        completion_mask=[1, 1, 1], base_logps=[-0.5, -1.0, -0.1], success=bool(i % 2), step=3)
             for i in range(3)]
    trainer = SimpleNamespace(last_rollout={"episodes": [], "trajectories": trajs}, lifecycle=None,
                              accelerator=SimpleNamespace(is_main_process=True))
    recorder = RunRecorder(trainer, MetricsWriter(tmp_path / "metrics.jsonl"), SimpleNamespace(steps=5),
                           log=lambda msg: None)
    state = SimpleNamespace(global_step=3)
    recorder.on_step_end(None, state, None)
    loaded = load_trajectories([tmp_path / "trajectories"])
    assert trajectory_file(tmp_path, 3).exists()
    assert [t.traj_id for t in loaded] == ["3-t0", "3-t1", "3-t2"]
    assert loaded[1].base_logps == [-0.5, -1.0, -0.1] and loaded[1].success is True


def test_other_processes_do_not_write(tmp_path):
    trajs = [Trajectory(traj_id="1-a", task_id="a", scope="s")]
    trainer = SimpleNamespace(last_rollout={"episodes": [], "trajectories": trajs}, lifecycle=None,
                              accelerator=SimpleNamespace(is_main_process=False))
    recorder = RunRecorder(trainer, MetricsWriter(tmp_path / "metrics.jsonl"), SimpleNamespace(steps=2),
                           log=lambda msg: None)
    recorder.on_step_end(None, SimpleNamespace(global_step=1), None)
    assert not (tmp_path / "trajectories").exists()
