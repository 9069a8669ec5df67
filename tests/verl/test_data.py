"""The dataset builder writes one verl row per task with the agent loop's task id and name."""

from __future__ import annotations

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

from skillduet_plugin.integrations.verl.data import build_dataset, task_rows  # noqa: E402


def test_rows_carry_task_ids_and_agent_name(tmp_path):
    paths = build_dataset("toy", str(tmp_path), train_split="train", val_split="valid",
                          factory="skillduet_plugin.envs.toy:make_toy", max_val=2)
    train = pd.read_parquet(paths["train"])
    assert list(train["agent_name"]) == ["skillduet_agent"] * 6
    assert [row["task_id"] for row in train["extra_info"]] == [f"toy-{i}" for i in range(6)]
    assert [row["index"] for row in train["extra_info"]] == list(range(6))
    test = pd.read_parquet(paths["test"])
    assert [row["split"] for row in test["extra_info"]] == ["valid", "valid"]
    assert task_rows("alfworld", ["g1"], "train")[0]["prompt"][0]["role"] == "user"
