"""``skillduet.shared_prefix_forward``: the tiny Qwen3 model through the packed forward against its plain SDPA
forward (logits and autograd gradients), the config switch and its one-line refusals, and verl's real ``fit()``
with the switch on against the same greedy run with it off."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from skillduet_plugin.core.settings import ConfigError  # noqa: E402
from skillduet_plugin.integrations.verl import shared_prefix as sp  # noqa: E402
from skillduet_plugin.integrations.verl.settings import apply_plugins  # noqa: E402
from skillduet_plugin.main_ppo import compose  # noqa: E402


def _groups(vocab: int, groups: int = 2, rows: int = 3, prefix: int = 90, suffix: int = 40, seed: int = 0):
    """A right-padded batch: ``groups`` prompts of ``prefix`` tokens, each followed by ``rows`` different
    responses of different lengths (as a task group's rollouts are)."""
    g = torch.Generator().manual_seed(seed)
    ids, mask = [], []
    for _ in range(groups):
        shared = torch.randint(10, vocab, (prefix,), generator=g)
        for j in range(rows):
            real = suffix - 7 * j
            row = torch.cat([shared, torch.randint(10, vocab, (suffix,), generator=g)])
            m = (torch.arange(prefix + suffix) < prefix + real).long()
            ids.append(row * m)
            mask.append(m)
    ids, mask = torch.stack(ids), torch.stack(mask)
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0) * mask


def _logits(model, ids, mask, pos, packed: bool):
    inputs, output_args = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}, {}
    model.config._attn_implementation = sp.ATTN_IMPLEMENTATION if packed else "sdpa"
    if packed:
        assert sp.pack_inputs(inputs, output_args)
        assert inputs["input_ids"].shape[1] < ids.numel()
    return sp.unpack_output(model(**inputs, use_cache=False), output_args)["logits"]


def test_packed_forward_equals_the_plain_forward_in_values_and_gradients(tiny_model):
    sp.register_attention()
    ids, mask, pos = _groups(tiny_model.config.vocab_size)
    real = mask.bool()
    labels = torch.randint(0, tiny_model.config.vocab_size, ids.shape, generator=torch.Generator().manual_seed(3))
    results = []
    for packed in (False, True):
        logits = _logits(tiny_model, ids, mask, pos, packed)
        loss = -(torch.log_softmax(logits, -1).gather(-1, labels[..., None])[..., 0] * real).sum()
        grads = torch.autograd.grad(loss, list(tiny_model.parameters()))
        results.append((logits, loss, grads))
    (plain, plain_loss, plain_grads), (packed, packed_loss, packed_grads) = results
    assert torch.allclose(plain[real], packed[real], atol=1e-5)
    assert packed_loss.item() == pytest.approx(plain_loss.item(), rel=1e-6)
    for a, b in zip(plain_grads, packed_grads):  # float32, summed in another order: relative to the gradient
        assert ((a - b).norm() / a.norm()).item() < 1e-5


def test_without_a_shared_prefix_the_forward_is_left_alone(tiny_model):
    sp.register_attention()
    ids, mask, pos = _groups(tiny_model.config.vocab_size, groups=2, rows=1)
    inputs = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
    assert not sp.pack_inputs(inputs, {}) and inputs["input_ids"] is ids
    # the registered attention is SDPA when no layout is carried (generation, unpacked batches)
    tiny_model.config._attn_implementation = sp.ATTN_IMPLEMENTATION
    with torch.no_grad():
        ours = tiny_model(**inputs, use_cache=False).logits
        tiny_model.config._attn_implementation = "sdpa"
        plain = tiny_model(**inputs, use_cache=False).logits
    assert torch.equal(ours, plain)


def test_the_switch_selects_the_attention_and_refuses_what_it_cannot_serve():
    base = ["trainer.plugins=[skillduet]", "skillduet.shared_prefix_forward=true"]
    config = compose(base + ["actor_rollout_ref.model.use_remove_padding=False",
                             "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"])
    assert apply_plugins(config)
    assert config.actor_rollout_ref.model.override_config.attn_implementation == sp.ATTN_IMPLEMENTATION
    off = compose(["trainer.plugins=[skillduet]", "actor_rollout_ref.model.use_remove_padding=False"])
    apply_plugins(off)
    assert off.actor_rollout_ref.model.override_config.get("attn_implementation") is None
    with pytest.raises(ConfigError, match="use_remove_padding=false"):
        apply_plugins(compose(base + ["actor_rollout_ref.model.use_remove_padding=True"]))
    with pytest.raises(ConfigError, match="attn_implementation='eager'"):
        apply_plugins(compose(base + ["actor_rollout_ref.model.use_remove_padding=False",
                                      "+actor_rollout_ref.model.override_config.attn_implementation=eager"]))


def test_verl_engine_is_wrapped_when_verl_imports_it():
    import skillduet_plugin.integrations.verl.plugin  # noqa: F401  (what verl's entry point imports)
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    assert getattr(FSDPEngineWithLMHead.prepare_model_inputs, "_skillduet_shared_prefix", False)


@pytest.mark.slow
def test_fit_with_the_shared_prefix_forward_matches_the_plain_fit(tmp_path: Path):
    """verl's ``fit()``, greedy rollouts, one worker, 2 steps, with and without the switch: step 1 (same weights,
    same trajectories) reports the same losses and counts, step 2 (weights after one update through the packed
    backward) the same losses; and the workers' log shows micro-batches were packed."""
    pytest.importorskip("ray")
    from skillduet_testing.verl_cpu_run import GREEDY_OVERRIDES, joined_ray_log
    from test_two_workers_fit import STEP2_KEYS, _fit, assert_same_step, step1_keys

    plain, _ = _fit(tmp_path, "plain", steps=2, save_freq=-1, overrides=GREEDY_OVERRIDES)
    packed, _ = _fit(tmp_path, "packed", steps=2, save_freq=-1,
                     overrides=[*GREEDY_OVERRIDES, "skillduet.shared_prefix_forward=true"])
    log = joined_ray_log((tmp_path / "packed.log").read_text(errors="replace"))
    assert "[skillduet] shared-prefix forward: a micro-batch of" in log
    assert "shared-prefix forward" not in joined_ray_log((tmp_path / "plain.log").read_text(errors="replace"))
    assert_same_step(plain[1], packed[1], step1_keys(plain[1]), 1)
    assert_same_step(plain[2], packed[2], STEP2_KEYS, 2)
