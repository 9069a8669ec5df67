"""A child process for the cache tests: builds one cache artefact, printing ``STARTED`` once the build is under
way (so the parent can SIGKILL it mid-build), or kills itself with SIGKILL right before the finished build would
be published (``--die-before-publish``: every file written, the worst moment to crash), or at a warm start's
``K``-th cloning checkpoint (``--die-after-checkpoint``: once it is saved; ``--die-writing-checkpoint``: halfway
through writing it).

    python cache_child.py tiny OUT [--die-before-publish]
    python cache_child.py warm CACHE MODEL_DIR STEPS [--die-before-publish] [--checkpoint-steps N]
                          [--die-after-checkpoint K | --die-writing-checkpoint K]
    python cache_child.py games             # generated ALFWorld valid_seen games into $SKILLDUET_CACHE
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def started(*_args) -> None:
    print("STARTED", flush=True)


def _option(argv: list[str], name: str, default: int) -> int:
    if name not in argv:
        return default
    i = argv.index(name)
    value = int(argv[i + 1])
    del argv[i:i + 2]
    return value


def _die_at_checkpoint(k: int, *, torn: bool) -> None:
    """SIGKILL this process at the warm start's ``k``-th cloning checkpoint: right after it is saved, or
    (``torn``) with half of its bytes written to the temporary file that would replace the previous one."""
    import io

    import torch

    from skillduet_plugin.warmstart.cache import BuildProgress

    save, count = BuildProgress.save_clone_state, [0]

    def dying_save(self, state):
        count[0] += 1
        if count[0] < k:
            return save(self, state)
        if not torn:
            save(self, state)
            os.kill(os.getpid(), signal.SIGKILL)
        buffer = io.BytesIO()
        torch.save(state, buffer)
        import skillduet_plugin.core.artefacts as artefacts

        def half(path):
            path.write_bytes(buffer.getvalue()[:len(buffer.getvalue()) // 2])
            os.kill(os.getpid(), signal.SIGKILL)

        artefacts.replace_file(self.folder / "clone.pt", half)

    BuildProgress.save_clone_state = dying_save


def main(argv: list[str]) -> None:
    import skillduet_plugin.core.artefacts as artefacts

    if "--die-before-publish" in argv:
        argv.remove("--die-before-publish")
        artefacts.publish = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    checkpoint_steps = _option(argv, "--checkpoint-steps", 100)
    die_after = _option(argv, "--die-after-checkpoint", 0)
    die_writing = _option(argv, "--die-writing-checkpoint", 0)
    if die_after or die_writing:
        _die_at_checkpoint(die_after or die_writing, torn=bool(die_writing))
    kind = argv[0]
    if kind == "tiny":
        import skillduet_plugin.warmstart.tiny_model as tiny

        build = tiny.build_tokenizer
        tiny.build_tokenizer = lambda **kw: (started(), build(**kw))[1]
        tiny.build_tiny(argv[1])
    elif kind == "warm":
        from runs_fakes import FAKE_TASKS, FakeAlfworld

        from skillduet_plugin.warmstart.cache import warm_start_model

        tasks = list(FAKE_TASKS)
        warm_start_model(argv[2], env_name="alfworld", make_env=lambda n: FakeAlfworld(tasks[:n]), games=2,
                         steps=int(argv[3]), batch_size=2, learning_rate=1e-3, skill_fraction=0.5, max_turns=6,
                         max_total_tokens=4096, skill_token_budget=64, skill_position="after_task", seed=0,
                         cache_root=argv[1], env_identity={"fake": 1}, log=started,
                         checkpoint_steps=checkpoint_steps)
    elif kind == "games":
        from skillduet_plugin.envs.alfworld import generator

        generator.DEFAULT_N_PER_TYPE["valid_seen"] = 1
        write = generator.generate_games
        generator.generate_games = lambda *a, **k: (started(), write(*a, **k))[1]
        generator.ensure_default_data("valid_seen")
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
