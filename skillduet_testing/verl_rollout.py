"""TEST-ONLY: a CPU rollout backend for verl 0.9.1 (``actor_rollout_ref.rollout.name=hf``), so verl's own
``main_ppo`` / ``fit()`` runs on a machine without a GPU (CI, a laptop). Never use it for real training.

verl's V1 trainer needs a rollout *server* (vLLM/SGLang/TRT-LLM). This module gives it one built from plain
transformers: :class:`CPURolloutReplica` (registered with ``RolloutReplicaRegistry``) starts one Ray actor,
:class:`CPURolloutServer`, that answers ``generate()`` with token ids, their log-probs and the global step of
the weights it serves, and a prefill with ``prompt_logprobs`` (what verl's distillation teacher asks vLLM for).
Inside the FSDP worker, verl's "naive" weight sync calls
:meth:`CPURolloutAdapter.update_weights` (found through ``verl.workers.rollout.base._ROLLOUT_REGISTRY``): it
materialises a CPU state dict and hands it to the server through Ray's object store.

Load it in every verl process together with the CPU platform shim, e.g. with :func:`cpu_rollout_env`.
``SKILLDUET_CPU_ROLLOUT_SKIP_SYNC_AT=<k>`` makes the sync at global step ``k`` keep the old weights (a negative
control: the rollout-vs-actor probability gap of step ``k + 1`` then shows the stale weights).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Iterable

import ray
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

from skillduet_testing.verl_cpu import MODULE as PLATFORM_MODULE
from skillduet_testing.verl_cpu import cpu_env

logger = logging.getLogger(__name__)

NAME = "hf"
MODULE = __name__
SKIP_SYNC_ENV = "SKILLDUET_CPU_ROLLOUT_SKIP_SYNC_AT"


def server_name(replica_rank: int) -> str:
    """The Ray actor name of a replica's server (looked up by the weight-sync adapter in the FSDP worker)."""
    return f"skillduet_cpu_rollout_server_{replica_rank}"


def _model_path(model_config: Any) -> str:
    """verl hands the replica the ``actor_rollout_ref.model`` section (a DictConfig or an HFModelConfig)."""
    return str(getattr(model_config, "local_path", None) or model_config.path)


class CPURolloutServer:
    """One transformers model on CPU answering verl's token-in/token-out ``generate``.

    Requests run one at a time (a lock also keeps a weight load from landing mid-generation). The returned
    log-probs are recomputed with one forward pass over prompt + response, exactly as verl's actor computes
    old log-probs, so with synced weights the two agree to float rounding.
    """

    def __init__(self, model_path: str, response_length: int, seed: int = 0) -> None:

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        torch.manual_seed(seed)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                          attn_implementation="sdpa").eval()
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        eos = self.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos] if eos is not None else []
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
            eos.append(tokenizer.eos_token_id)
        self.eos_token_ids = [int(t) for t in eos]
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        self.response_length = int(response_length)
        self.global_steps: int | None = None
        self.weight_loads = 0
        self._lock = asyncio.Lock()

    async def ready(self) -> bool:
        return True

    # ------------------------------------------------------------------ generation
    def _generate(self, prompt_ids: list[int], params: dict[str, Any]) -> tuple[list[int], list[float]]:
        max_tokens = int(params.get("max_tokens") or params.get("max_new_tokens") or self.response_length)
        temperature = float(params.get("temperature", 1.0) or 0.0)
        top_p = float(params.get("top_p", 1.0) or 1.0)
        top_k = int(params.get("top_k", -1) or -1)
        stop = list(self.eos_token_ids) + [int(t) for t in (params.get("stop_token_ids") or [])]
        prompt = torch.tensor([prompt_ids], dtype=torch.long)
        kwargs: dict[str, Any] = dict(max_new_tokens=max(1, max_tokens), eos_token_id=stop,
                                      pad_token_id=self.pad_token_id)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else 0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        seed = params.get("seed")
        with torch.no_grad(), torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:  # a request with its own seed (vLLM's per-request generator) leaves the rest alone
                torch.manual_seed(int(seed))
            out = self.model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)
            ids = out[0, len(prompt_ids):].tolist()
            full = torch.tensor([list(prompt_ids) + ids], dtype=torch.long)
            logits = self.model(input_ids=full).logits[0, len(prompt_ids) - 1:-1].float()
            scale = temperature if temperature > 0 else 1.0
            logps = torch.log_softmax(logits / scale, dim=-1).gather(-1, torch.tensor(ids).unsqueeze(-1))
        return ids, logps.squeeze(-1).tolist()

    def _prefill(self, prompt_ids: list[int], params: dict[str, Any]) -> tuple[list[int], list[float], dict]:
        """vLLM's ``prompt_logprobs=0`` contract (verl's ``extract_prompt_logprobs``): entry ``j`` of
        ``prompt_logprobs`` is ``[log p(prompt[j+1] | prompt[:j+1])]`` at temperature 1 (raw logits, as vLLM's
        default logprobs mode), the last entry a dummy 0; plus one greedy token, as ``max_tokens=1`` gives."""
        if int(params["prompt_logprobs"]) != 0:
            raise NotImplementedError("the CPU test rollout serves prompt_logprobs=0 (sampled-token log-probs) only")
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([prompt_ids], dtype=torch.long)).logits[0].float()
            logps = torch.log_softmax(logits, dim=-1)
            targets = torch.tensor(prompt_ids[1:], dtype=torch.long)
            prompt_lp = logps[:-1].gather(-1, targets.unsqueeze(-1)).squeeze(-1).tolist()
            next_id = int(logps[-1].argmax())
        extra = {"prompt_ids": [[t] for t in prompt_ids[1:]] + [[0]],
                 "prompt_logprobs": [[v] for v in prompt_lp] + [[0.0]]}
        return [next_id], [float(logps[-1, next_id])], extra

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        if sampling_params.get("prompt_logprobs") is not None:
            async with self._lock:
                ids, logps, extra = await asyncio.to_thread(self._prefill, list(prompt_ids), dict(sampling_params))
                extra["global_steps"] = self.global_steps
            return TokenOutput(token_ids=ids, log_probs=logps, stop_reason="length", extra_fields=extra)
        async with self._lock:
            ids, logps = await asyncio.to_thread(self._generate, list(prompt_ids), dict(sampling_params))
            steps = self.global_steps
        finished = bool(ids) and ids[-1] in self.eos_token_ids
        return TokenOutput(token_ids=ids, log_probs=logps, stop_reason="completed" if finished else None,
                           extra_fields={"global_steps": steps})

    # ------------------------------------------------------------------ weights
    async def load_weights(self, state_dict: dict[str, torch.Tensor], global_steps: int | None) -> dict[str, Any]:
        """Replace the served weights (``None``: keep them, only move the version on)."""
        async with self._lock:
            result: dict[str, Any] = {"loaded": 0}
            if state_dict is not None:
                missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
                missing = [k for k in missing if not self._tied(k)]
                if missing or unexpected:
                    raise RuntimeError(f"weight sync does not match the served model: missing {missing[:5]}, "
                                       f"unexpected {unexpected[:5]}")
                self.weight_loads += 1
                result["loaded"] = len(state_dict)
            if global_steps is not None:
                self.global_steps = int(global_steps)
            return result

    def _tied(self, key: str) -> bool:
        return key == "lm_head.weight" and bool(getattr(self.model.config, "tie_word_embeddings", False))

    async def stats(self) -> dict[str, Any]:
        return {"global_steps": self.global_steps, "weight_loads": self.weight_loads}

    # ------------------------------------------------------------------ lifecycle: nothing to free on CPU
    async def wake_up(self) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class CPURolloutReplica(RolloutReplica):
    """One CPU server per replica; no GPUs, no worker processes of its own."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        name = server_name(self.replica_rank)
        actor_cls = ray.remote(CPURolloutServer)
        # num_cpus=0: the server must not wait for a CPU that verl's placement groups already reserved.
        server = actor_cls.options(name=name, num_cpus=0, max_concurrency=self.max_concurrency).remote(
            _model_path(self.model_config), int(self.config.response_length), int(self.config.seed))
        await server.ready.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"cpu-rollout-{self.replica_rank}"


class CPURolloutAdapter(BaseRollout):
    """The rollout side of the FSDP worker: forwards verl's naive weight sync to the CPU server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        world = self.config.tensor_model_parallel_size * self.config.data_parallel_size * \
            self.config.pipeline_model_parallel_size
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank // world
        self.is_leader = rank % world == 0
        self._server = None

    def _server_handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Iterable, wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the CPU test rollout takes full named tensors, not {wire_format!r}")
        global_steps = kwargs.get("global_steps")
        start = time.perf_counter()
        # Every rank must drain the generator (it may all-gather sharded tensors); only the leader sends.
        state = {name: tensor.detach().to("cpu").clone() for name, tensor in weights}
        if not self.is_leader:
            return None
        skip_at = os.environ.get(SKIP_SYNC_ENV, "")
        if skip_at and global_steps is not None and int(skip_at) == int(global_steps):
            print(f"[cpu rollout] {SKIP_SYNC_ENV}={skip_at}: the rollout keeps its old weights after step "
                  f"{global_steps} (negative control)", flush=True)
            state = None
        ref = ray.put(state)
        await self._server_handle().load_weights.remote(ref, global_steps)
        logger.info("cpu rollout weight sync: %d tensors in %.3f s", len(state or {}), time.perf_counter() - start)
        return None


def register() -> None:
    """Register ``rollout.name=hf`` with verl's replica registry and the worker-side rollout registry."""
    RolloutReplicaRegistry.register(NAME, lambda: CPURolloutReplica)
    rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{MODULE}.CPURolloutAdapter"


def cpu_rollout_env(extra_pythonpath: str | None = None) -> dict[str, str]:
    """Environment variables loading the CPU platform shim and this backend in every verl process."""

    env = cpu_env(extra_pythonpath)
    env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray refuses an empty value; the platform shim needs none
    env["VERL_USE_EXTERNAL_MODULES"] = f"{PLATFORM_MODULE},{MODULE}"
    env["OMP_NUM_THREADS"] = "1"
    return env


register()

__all__ = ["CPURolloutAdapter", "CPURolloutReplica", "CPURolloutServer", "NAME", "SKIP_SYNC_ENV",
           "cpu_rollout_env", "register", "server_name"]
