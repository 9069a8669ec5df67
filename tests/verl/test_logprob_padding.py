"""Teacher/scoring log-prob requests of any row count reach a data-parallel actor whose ranks split their rows
into micro-batches of a fixed size (verl's engine without dynamic batch sizes): ``compute_response_logprobs``
pads every request to a multiple of dp x micro and returns exactly the real rows, in order."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from skillduet_plugin.integrations.verl.teacher import compute_response_logprobs  # noqa: E402


class StrictDPGroup:
    """``compute_log_prob`` like verl's dispatch: rows split evenly over ``dp`` ranks (an error otherwise), each
    rank's rows split into micro-batches of exactly ``micro`` rows (an error otherwise). The log-prob of token
    ``x`` at position ``j`` is ``-(x + j) / 1000``, so each value says which row it came from."""

    def __init__(self, dp: int, micro: int) -> None:
        self.dp, self.micro = dp, micro
        self.rows_seen: list[int] = []

    def compute_log_prob(self, td):
        rows = td["input_ids"].unbind()
        if len(rows) % self.dp:
            raise RuntimeError(f"{len(rows)} rows do not split over dp={self.dp}")
        if (len(rows) // self.dp) % self.micro:
            raise RuntimeError(f"{len(rows) // self.dp} rows per rank do not split into micro-batches of {self.micro}")
        self.rows_seen.append(len(rows))
        values = [-(ids.float() + torch.arange(ids.numel())) / 1000.0 for ids in rows]
        return {"log_probs": torch.nested.as_nested_tensor(values, layout=torch.jagged)}


def _expected(context: list[int], response: list[int]) -> torch.Tensor:
    full = context + response
    pos = torch.arange(len(context) - 1, len(full) - 1)
    return -(torch.tensor(full, dtype=torch.float32)[pos] + pos) / 1000.0


@pytest.mark.parametrize("rows", [1, 3, 5])
def test_any_row_count_is_padded_for_two_ranks_and_micro_batches(rows):
    group = StrictDPGroup(dp=2, micro=2)
    contexts = [[10 + i, 20 + i, 30][: 1 + i % 3] for i in range(rows)]
    responses = [[40 + i] * (1 + i) for i in range(rows)]
    out = compute_response_logprobs(group, contexts, responses, temperature=1.0, dp_size=2 * 2)
    assert len(out) == rows and group.rows_seen == [-(-rows // 4) * 4]
    for got, ctx, resp in zip(out, contexts, responses):
        assert torch.equal(got, _expected(ctx, resp))


def test_padding_to_the_dp_size_alone_is_not_enough():
    # negative control: the defect of padding only to dp (1 row -> 2 rows, 1 per rank, micro-batches of 2)
    with pytest.raises(RuntimeError, match="micro-batches of 2"):
        compute_response_logprobs(StrictDPGroup(dp=2, micro=2), [[1, 2]], [[3]], temperature=1.0, dp_size=2)
