"""Run in a subprocess with a patched legacy verl (<= 0.8, with ``dp_actor.py``) first on PYTHONPATH: one
``update_policy`` call on a hand-made batch, compared with ``skillduet_plugin.core.opd``. Prints one JSON line."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist


def main() -> None:
    os.environ["SKILLDUET_OPD_COEF"] = "0.3"
    os.environ["SKILLDUET_GATE_BETA"] = "5.0"
    init_file = os.path.join(tempfile.mkdtemp(), "pg")
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=0, world_size=1)
    import verl
    import verl.workers.actor.dp_actor as dp_actor
    from verl import DataProto
    from verl.workers.config import FSDPActorConfig

    from skillduet_plugin.core.opd import opd_loss

    assert os.path.dirname(verl.__file__).startswith(sys.argv[1]), verl.__file__  # the patched legacy copy
    dp_actor.get_device_id = lambda: "cpu"
    config = FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=3, ppo_micro_batch_size_per_gpu=3, rollout_n=1,
                             use_kl_loss=False, entropy_coeff=0.0, loss_agg_mode="token-mean", ppo_epochs=1)
    actor = dp_actor.DataParallelPPOActor(config, actor_module=torch.nn.Linear(1, 1),
                                          actor_optimizer=torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))]))
    g = torch.Generator().manual_seed(0)
    bsz, length = 3, 5
    student = (-(torch.rand(bsz, length, generator=g) * 3 + 0.1)).requires_grad_(True)
    teacher = student.detach() + torch.randn(bsz, length, generator=g)
    response_mask = torch.ones(bsz, length)
    response_mask[0, 3:] = 0  # environment tokens
    opd_mask = torch.tensor([[1.0] * length, [0.0] * length, [1.0] * length])  # row 1 has no Local skill
    seen = {}

    def forward(model_inputs, temperature, calculate_entropy=False, **kwargs):
        seen["keys"] = sorted(k for k in model_inputs if k.startswith("skillduet"))
        return {"log_probs": student}

    actor._forward_micro_batch = forward
    actor._optimizer_step = lambda: torch.tensor(0.0)
    data = DataProto.from_dict(tensors={
        "responses": torch.zeros(bsz, length, dtype=torch.long), "response_mask": response_mask,
        "input_ids": torch.zeros(bsz, length + 2, dtype=torch.long),
        "attention_mask": torch.ones(bsz, length + 2, dtype=torch.long),
        "position_ids": torch.arange(length + 2).repeat(bsz, 1), "old_log_probs": student.detach(),
        "advantages": torch.zeros(bsz, length),
        "skillduet_teacher_log_probs": teacher, "skillduet_opd_mask": opd_mask,
    }, meta_info={"temperature": 1.0})
    metrics = actor.update_policy(data)

    ref_student = student.detach().clone().requires_grad_(True)
    expected, _ = opd_loss(ref_student, teacher, response_mask * opd_mask, beta=5.0)
    (0.3 * expected).backward()
    print("RESULT" + json.dumps({
        "keys": seen["keys"],
        "opd_metric": metrics["skillduet/opd_loss"][0], "expected_opd": expected.item(),
        "grad_max_diff": (student.grad - ref_student.grad).abs().max().item(),
        "grad_norm": ref_student.grad.abs().sum().item(),
        "row1_grad": student.grad[1].abs().sum().item(),
    }))


if __name__ == "__main__":
    main()
