"""verl's padded actor forward with each task group's shared prompt computed once (``core.shared_prefix``).

Opt in with the attention implementation ``actor_rollout_ref.model.override_config.attn_implementation=
skillduet_shared_prefix`` (``skillduet.shared_prefix_forward=true`` sets it). It is PyTorch's SDPA attention in
every call but one: a micro-batch of verl's FSDP engine on the padded path (``use_remove_padding=False``, the
CPU path; the flash-attention varlen path of GPU recipes packs rows its own way and is left alone). There
``FSDPEngineWithLMHead.prepare_model_inputs`` is wrapped to pack the right-padded rows, each group's shared prefix
once, into one ``(1, total)`` sequence and to hand the model the layout as a keyword argument that reaches this
attention function; ``prepare_model_outputs`` is wrapped to unpack the logits to verl's ``(rows, length)`` before
verl reads them. The model is still called once per micro-batch, inside FSDP's hooks, so FSDP sees an ordinary
forward and backward. Everything downstream (log-probs, entropy, the losses) is verl's own, on logits equal to the
plain forward's up to the order of summation (tested in ``tests/verl/test_shared_prefix_forward.py``).
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any

import torch

from skillduet_plugin.core import shared_prefix

logger = logging.getLogger(__name__)

ATTN_IMPLEMENTATION = "skillduet_shared_prefix"
LAYOUT_KEY = "skillduet_prefix_layout"
#: what the last packed micro-batch saved, per process (rows x length, packed total); read by tests and benchmarks
LAST: dict[str, int] = {}


def _attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
               scaling: float | None = None, dropout: float = 0.0, **kwargs: Any):
    """The attention function registered as ``skillduet_shared_prefix``: the packed layout when the forward
    carries one, SDPA otherwise."""
    layout = kwargs.pop(LAYOUT_KEY, None)
    if layout is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward  # lazy: transformers
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    out = shared_prefix.attention(layout, query, key, value, scale=scaling,
                                  dropout=dropout if module.training else 0.0)
    return out.transpose(1, 2).contiguous(), None


def register_attention() -> None:
    """Register the attention function and its mask (SDPA's) with transformers; idempotent."""
    from transformers import AttentionInterface  # lazy: transformers
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, _attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_IMPLEMENTATION, sdpa_mask)


def _active(engine: Any) -> bool:
    config = getattr(getattr(engine, "module", None), "config", None)
    return getattr(config, "_attn_implementation", None) == ATTN_IMPLEMENTATION


def pack_inputs(model_inputs: dict, output_args: dict, min_prefix: int = shared_prefix.MIN_PREFIX) -> bool:
    """Pack a padded micro-batch's ``input_ids`` / ``position_ids`` in place when its rows share a prefix;
    the layout goes to the model (keyword argument) and to ``output_args`` (for the unpacking). False: left as is."""
    ids, mask, pos = (model_inputs.get(k) for k in ("input_ids", "attention_mask", "position_ids"))
    if not all(isinstance(t, torch.Tensor) for t in (ids, mask, pos)) or ids.dim() != 2 or pos.shape != ids.shape:
        return False
    if set(model_inputs) - {"input_ids", "attention_mask", "position_ids"}:
        return False  # multi-modal inputs or fused-kernel arguments: not a plain text forward
    layout = shared_prefix.plan(ids, mask, min_prefix=min_prefix)
    if layout is None:
        return False
    model_inputs["input_ids"] = layout.pack(ids)
    model_inputs["position_ids"] = layout.pack(pos)
    # a 4-D mask is used as given by transformers' mask builders (no (total x total) mask is built); the layout,
    # not this placeholder, decides what each query sees
    model_inputs["attention_mask"] = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=ids.device)
    model_inputs[LAYOUT_KEY] = layout
    output_args[LAYOUT_KEY] = layout
    if not LAST:  # once per process: the run's log shows that the packing is on, and what it saves
        print(f"[skillduet] shared-prefix forward: a micro-batch of {layout.rows} x {layout.length} tokens packed "
              f"into {layout.total} ({len(layout.clusters)} prefix groups)", flush=True)
    LAST.update(rows=layout.rows, length=layout.length, total=layout.total, clusters=len(layout.clusters))
    return True


def unpack_output(output: Any, output_args: dict) -> Any:
    """The model output with its logits back in the ``(rows, length, vocab)`` layout verl expects."""
    layout = output_args.get(LAYOUT_KEY)
    if layout is not None:
        output["logits"] = layout.unpack(output["logits"])
    return output


def install() -> None:
    """Register the attention function and wrap verl's FSDP engine (run when verl imports its engine module)."""
    from verl.utils import tensordict_utils as tu  # lazy: verl

    register_attention()
    engine_module = sys.modules["verl.workers.engine.fsdp.transformer_impl"]
    cls = engine_module.FSDPEngineWithLMHead
    if getattr(cls.prepare_model_inputs, "_skillduet_shared_prefix", False):
        return
    inputs, outputs = cls.prepare_model_inputs, cls.prepare_model_outputs

    @functools.wraps(inputs)
    def prepare_model_inputs(self, micro_batch, *args, **kwargs):
        model_inputs, output_args = inputs(self, micro_batch, *args, **kwargs)
        if _active(self) and not tu.get_non_tensor_data(data=micro_batch, key="use_remove_padding", default=True):
            pack_inputs(model_inputs, output_args)
        return model_inputs, output_args

    @functools.wraps(outputs)
    def prepare_model_outputs(self, output, output_args, *args, **kwargs):
        return outputs(self, unpack_output(output, output_args), output_args, *args, **kwargs)

    prepare_model_inputs._skillduet_shared_prefix = True
    cls.prepare_model_inputs = prepare_model_inputs
    cls.prepare_model_outputs = prepare_model_outputs


__all__ = ["ATTN_IMPLEMENTATION", "LAYOUT_KEY", "install", "pack_inputs", "register_attention", "unpack_output"]
