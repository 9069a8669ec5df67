"""The lean OPD teacher pass (``core.logprobs.response_logprobs``: unpadded rows, no attention mask, LM head at
completion positions only) gives the numbers of TRL's own left-padded, attention-masked log-prob pass, on the real
tiny model in float32, with prompts and completions of different lengths (left and right padding)."""

from __future__ import annotations

import pytest
import torch


def _ragged_batch(vocab: int, pad_id: int):
    """Left-padded prompts and right-padded completions of different lengths, plus their masks."""
    gen = torch.Generator().manual_seed(7)
    prompt_lens, completion_lens = [9, 23, 4, 15, 23], [12, 5, 17, 1, 9]
    p_width, c_width = max(prompt_lens), max(completion_lens)
    p_ids = torch.full((5, p_width), pad_id, dtype=torch.long)
    p_mask = torch.zeros((5, p_width), dtype=torch.long)
    c_ids = torch.full((5, c_width), pad_id, dtype=torch.long)
    c_mask = torch.zeros((5, c_width), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_lens, completion_lens)):
        p_ids[i, p_width - p:] = torch.randint(3, vocab, (p,), generator=gen)
        p_mask[i, p_width - p:] = 1
        c_ids[i, :c] = torch.randint(3, vocab, (c,), generator=gen)
        c_mask[i, :c] = 1
    return p_ids, p_mask, c_ids, c_mask, completion_lens


@pytest.mark.parametrize("temperature", [1.0, 0.7])  # TRL divides its logits by the sampling temperature
def test_lean_teacher_pass_equals_trls_log_prob_pass(make_trainer, temperature):
    trainer = make_trainer(skillduet={"opd_coef": 1.0, "use_global": False}, temperature=temperature,
                           logprob_token_budget=40)  # several chunks, one row longer than a chunk
    vocab = trainer.model.config.vocab_size
    p_ids, p_mask, c_ids, c_mask, lengths = _ragged_batch(vocab, trainer.chat.pad_token_id)
    rows = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0])  # row 2 has no Local skill: stays 0
    trainer.model.train()  # as at generation time in a training step
    lean = trainer._teacher_logps(trainer.model, p_ids, p_mask, c_ids, c_mask, rows)
    idx = torch.nonzero(rows).flatten()
    trl = trainer._teacher_logps_trl(trainer.model, p_ids, p_mask, c_ids, c_mask, idx)
    mask = c_mask.float() * rows[:, None]
    assert lean.dtype == torch.float32 and lean.shape == c_ids.shape
    torch.testing.assert_close(lean * mask, trl * mask, atol=1e-5, rtol=0)
    assert (lean[2] == 0).all() and (lean * (1 - c_mask)).abs().max() == 0  # unscored and padded positions
    # Negative control: the same rows without their prompts differ, so the comparison can fail.
    no_prompt = trainer._teacher_logps(trainer.model, p_ids[:, -1:], p_mask[:, -1:], c_ids, c_mask, rows)
    assert (no_prompt * mask - trl * mask).abs().max() > 1e-2
    for i in idx.tolist():  # every scored position holds a real log-prob
        assert (lean[i, :lengths[i]] < 0).all()


def test_forward_stops_at_the_last_needed_position(make_trainer):
    trainer = make_trainer(skillduet={"opd_coef": 1.0, "use_global": False})
    p_ids, p_mask, c_ids, c_mask, lengths = _ragged_batch(trainer.model.config.vocab_size, trainer.chat.pad_token_id)
    rows = torch.ones(5)
    needed = c_mask.float().clone()
    needed[0, 4:] = 0  # row 0: an unsupervised tail (the environment's last reply)
    needed[2, 3:8] = 0  # row 2: a gap, then supervised again
    full = trainer._teacher_logps(trainer.model, p_ids, p_mask, c_ids, c_mask, rows)
    cut = trainer._teacher_logps(trainer.model, p_ids, p_mask, c_ids, c_mask, rows, needed=needed)
    torch.testing.assert_close(cut * needed, full * needed, atol=1e-5, rtol=0)
    assert (cut[0, 4:] == 0).all() and (full[0, 4:lengths[0]] != 0).all()  # the tail was not computed
    assert (cut[2, :lengths[2]] != 0).all()  # a gap does not cut the row


def test_sharded_weights_take_trls_pass(make_trainer, monkeypatch):
    trainer = make_trainer(skillduet={"opd_coef": 1.0, "use_global": False})
    p_ids, p_mask, c_ids, c_mask, _ = _ragged_batch(trainer.model.config.vocab_size, trainer.chat.pad_token_id)
    rows = torch.ones(5)
    calls = []
    original = trainer._teacher_logps_trl
    monkeypatch.setattr(trainer, "_teacher_logps_trl", lambda *a: calls.append(1) or original(*a))
    trainer._teacher_logps(trainer.model, p_ids, p_mask, c_ids, c_mask, rows)
    assert not calls
    monkeypatch.setattr(trainer, "_sharded_weights", lambda: True)
    trainer._teacher_logps(trainer.model, p_ids, p_mask, c_ids, c_mask, rows)
    assert calls == [1]
