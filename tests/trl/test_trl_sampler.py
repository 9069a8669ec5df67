"""The task sampler keeps the uninterrupted run's order across a resume: epoch ``e`` is the ``e``-th draw of the
seeded generator however epoch ``e`` is reached (``integrations.trl.data.ResumableRepeatSampler``)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from trl.trainer.utils import RepeatSampler  # noqa: E402

from skillduet_plugin.integrations.trl.data import ResumableRepeatSampler  # noqa: E402

KW = dict(data_source=list(range(15)), mini_repeat_count=8, batch_size=5, repeat_count=1, shuffle=True, seed=3)


def _epochs(sampler, epochs, set_epoch=True):
    out = []
    for epoch in epochs:
        if set_epoch:
            sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def test_an_uninterrupted_run_draws_trls_sequence():
    trl = _epochs(RepeatSampler(**KW), range(4), set_epoch=False)
    assert _epochs(ResumableRepeatSampler.of(RepeatSampler(**KW)), range(4)) == trl
    # without set_epoch (a loader that never calls it) it is TRL's sampler
    assert _epochs(ResumableRepeatSampler.of(RepeatSampler(**KW)), range(4), set_epoch=False) == trl
    assert len({tuple(e) for e in trl}) == 4  # the epochs do differ (else the checks below could not fail)


@pytest.mark.parametrize("start", [1, 2, 3])
def test_a_run_resumed_in_a_later_epoch_gets_that_epochs_order(start):
    whole = _epochs(RepeatSampler(**KW), range(5), set_epoch=False)
    resumed = _epochs(ResumableRepeatSampler.of(RepeatSampler(**KW)), range(start, 5))
    assert resumed == whole[start:]
    # negative control: TRL's own sampler, built afresh on resume, replays epoch 0's order
    assert _epochs(RepeatSampler(**KW), range(start, 5), set_epoch=False)[0] == whole[0] != whole[start]


def test_of_keeps_trls_settings():
    trl = RepeatSampler(**KW)
    ours = ResumableRepeatSampler.of(trl)
    assert (ours.mini_repeat_count, ours.batch_size, ours.repeat_count, ours.seed, ours.num_samples) == (8, 5, 1, 3, 15)
    assert len(ours) == len(trl)
