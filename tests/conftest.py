"""Shared fixtures: offline environment, the tiny model, and the team's benchmark data (if present)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SKILLDUET_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch is a hard dependency
        has_cuda = False
    if not has_cuda:
        skip_gpu = pytest.mark.skip(reason="needs a CUDA device (run on a GPU machine)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _wandb_forgets_its_settings():
    """W&B reads ``WANDB_DIR`` and ``WANDB_MODE`` once per process (its setup singleton) and a later ``wandb.init``
    reuses them, so a second test on the same worker would write its offline run into the first test's folder.
    After any test that loaded wandb, finish its run and drop the singleton."""
    yield
    wandb = sys.modules.get("wandb")
    if wandb is not None and hasattr(wandb, "teardown"):
        if getattr(wandb, "run", None) is not None:
            wandb.finish()
        wandb.teardown()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (real ALFWorld/WebShop data); tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark data not found at {SHARED_DATA} (set SKILLDUET_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """Folder holding the tiny tokenizer + Qwen3 model (built once per test session, ~seconds)."""
    from skillduet_plugin.warmstart.tiny_model import build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny_model"), size="tiny")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture()
def tiny_model(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model.eval()
    return model
