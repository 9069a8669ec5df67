"""TEST-ONLY: verl's vLLM server classes with the one change vLLM's CPU build needs for verl's weight sync.

vLLM's CPU linear layers repack their weights after loading (``dispatch_cpu_unquantized_gemm``: oneDNN or
packed kernels hold the weight, ``layer.weight`` becomes an empty parameter without a ``weight_loader``), so
verl's ``update_weights_from_ipc`` -> ``model.load_weights`` fails on the second load
(``'Parameter' object has no attribute 'weight_loader'``). vLLM's own in-place reload
(``GPUModelRunner.reload_weights``) handles this with its layerwise reload: restore the checkpoint-format
parameters, load, re-process. :class:`CPUWorkerExtension` runs verl's receive-and-load inside that bracket;
:class:`CPUvLLMHttpServer` names it as the worker extension (verl's ``_get_worker_extension_cls`` hook) and
:class:`CPUvLLMReplica` starts that server. Everything else is verl's and vLLM's code.

Imported only where vLLM runs (the replica's loader, the server actor, vLLM's worker process).
"""

from __future__ import annotations

from typing import Any

import ray
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica
from vllm.model_executor.model_loader import utils as loader_utils
from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

from skillduet_testing.vllm_socket import RUN_TAG_ENV, tagged_zmq_handle


class CPUWorkerExtension(vLLMColocateWorkerExtension):
    """verl's worker extension whose weight sync goes through vLLM's layerwise reload."""

    def _get_zmq_handle(self) -> str:
        return tagged_zmq_handle(super()._get_zmq_handle())

    def update_weights_from_ipc(self, *args: Any, **kwargs: Any) -> Any:

        for model in self._iter_all_models():
            initialize_layerwise_reload(model)
        original = loader_utils.process_weights_after_loading

        def finalize(model: Any, model_config: Any, target_device: Any) -> None:
            # verl ends its sync with process_weights_after_loading (it imports it at call time); after a
            # layerwise reload the matching step is finalize_layerwise_reload, which re-processes each layer once
            finalize_layerwise_reload(model, model_config)

        loader_utils.process_weights_after_loading = finalize
        try:
            return super().update_weights_from_ipc(*args, **kwargs)
        finally:
            loader_utils.process_weights_after_loading = original


class CPUvLLMHttpServer(vLLMHttpServer):
    def _get_worker_extension_cls(self) -> str:
        return f"{__name__}.CPUWorkerExtension"


class CPUvLLMReplica(vLLMReplica):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(CPUvLLMHttpServer)


__all__ = ["RUN_TAG_ENV", "CPUWorkerExtension", "CPUvLLMHttpServer", "CPUvLLMReplica", "tagged_zmq_handle"]
