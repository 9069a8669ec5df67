"""TEST-ONLY: the per-run name of verl's weight-sync socket, shared by the trainer side (``verl_vllm``) and the
vLLM server side (``verl_vllm_server``) of the CPU vLLM rollout."""

from __future__ import annotations

import os

RUN_TAG_ENV = "SKILLDUET_VLLM_RUN_TAG"  # names this run's weight-sync socket


def tagged_zmq_handle(handle: str) -> str:
    """verl names its weight-sync socket after the Ray job id, which is the same (``01000000``) in every local
    Ray cluster: two runs on one machine would share a socket. A per-run tag (both sides) keeps them apart."""
    tag = os.environ.get(RUN_TAG_ENV, "")
    return handle[: -len(".sock")] + f"-{tag}.sock" if tag and handle.endswith(".sock") else handle
