"""Weight sync into TRL's colocated vLLM engine on vLLM's CPU build.

TRL's colocate sync calls ``model.load_weights([(name, tensor)])`` on the live vLLM model, one tensor at a time.
On CPU, vLLM repacks every linear layer's weight for its GEMM kernels after loading and leaves an empty parameter
in its place (``layers/utils.py: dispatch_cpu_unquantized_gemm(remove_weight=True)``), so that call fails
(``'Parameter' object has no attribute 'weight_loader'``). vLLM's own in-place reload
(``model_runner.reload_weights(weights_iterator, is_checkpoint_format=True)``) restores the layers, loads the
checkpoint-format tensors and repacks them: the CPU sync hands it all the policy's parameters at once.
"""

from __future__ import annotations

import types
from typing import Any

from vllm.platforms import current_platform


def install_cpu_weight_sync(vllm_generation: Any) -> bool:
    """Replace ``vllm_generation.sync_weights`` by the in-place reload when vLLM runs on CPU in colocate mode;
    returns whether it did (GPU platforms keep TRL's own sync)."""

    if getattr(vllm_generation, "mode", None) != "colocate" or not current_platform.is_cpu():
        return False

    def sync_weights(self: Any) -> None:
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.reload_weights(weights_iterator=list(self._iter_named_params()), is_checkpoint_format=True)
        self.llm.reset_prefix_cache()

    vllm_generation.sync_weights = types.MethodType(sync_weights, vllm_generation)
    return True
