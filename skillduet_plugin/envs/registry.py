"""The environment registry: everything the rest of SkillDuet needs to know about one environment, by name.

An environment is one package under ``envs/`` (or any module of yours) whose factory carries
``@register_env(name, ...)``: the factory, its prompt pieces, how a response becomes an action and its expert for
the warm start. What other layers need from an environment they register themselves against its name (the
offline analyzer's rules: ``llm.offline_common.register_offline_rules``; ``skillduet train``'s presets:
``runs.env_defaults.register_run_defaults``), so that nothing here names a module above ``envs/``. Nothing outside
``envs/`` tests an environment's name: it asks :func:`env_spec`. The built-in packages register themselves on the
first lookup, and an installed package adds its own through the ``skillduet.envs`` entry-point group.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from skillduet_plugin.core.registry import Registry, resolve_target

if TYPE_CHECKING:  # pragma: no cover
    from skillduet_plugin.envs.base import TextEnv
    from skillduet_plugin.envs.prompts import PromptTemplates


@dataclass(frozen=True)
class EnvSpec:
    """One registered environment.

    Attributes:
        name: the registry name (``env=``, ``env_name=``, ``skillduet.env.name=``).
        factory: ``factory(data_dir=None, split=..., **kw) -> TextEnv``.
        target: ``"module:function"`` of the factory, which spawned pool workers import.
        prompts: the pieces of the standard verl-agent prompt (``envs.prompts``); None with ``initial_messages``.
        format_observation: ``(obs, task) -> text`` as prompts show an observation (default: stripped).
        format_actions: ``(admissible) -> shown actions`` (default: as given, ``help`` dropped).
        initial_messages / turn_message: replace the standard prompt builder (same signatures as
            ``envs.prompts.initial_messages`` / ``turn_message``).
        project_action: replaces the standard ``<action>`` parser (same signature as
            ``envs.projection.project_action``).
        free_text_actions: actions are free text (WebShop's ``search[...]``): a response need not be one of the
            admissible strings, and ``action_selection=auto`` generates instead of choosing.
        make_expert: the warm start's expert, ``(env, task_id, kind, seed) -> expert(obs, info, turn) -> action``
            (``kind`` is ``warm_start.expert``); None: no warm start for this env.
        default_data_identity: ``() -> dict`` naming what ``data_dir=None`` loads (a data folder from the
            environment, or the generator's version), so caches keyed on the data notice when it changes.
        default_panel: the evaluation split when a run names none.
        limit_keyword: the factory keyword that keeps the first N tasks (None: callers cut ``env.tasks``).
        choose_kwargs: factory keywords added when the policy chooses among admissible actions (``choose`` mode).
        per_type_report: evaluation tables show a column per task type (else score and success).
        scope_order: the order of task types in reports.
        tiny_corpus: ``() -> lines`` of the environment's own text (product words, option values...) that a tiny
            model built for it learns as tokens (``warmstart.tiny_model``), with ``tiny_vocab_size`` tokens; None:
            the default tiny build.
    """

    name: str
    factory: Callable[..., "TextEnv"]
    target: str
    prompts: "PromptTemplates | None" = None
    format_observation: Callable[[str, str | None], str] | None = None
    format_actions: Callable[[Sequence[str]], list[str]] | None = None
    initial_messages: Callable[..., list[dict[str, str]]] | None = None
    turn_message: Callable[..., str] | None = None
    project_action: Callable[..., tuple[str, bool]] | None = None
    free_text_actions: bool = False
    make_expert: Callable[..., Callable[[str, dict, int], str]] | None = None
    default_data_identity: Callable[[], dict[str, Any]] | None = None
    default_panel: str = "test"
    limit_keyword: str | None = None
    choose_kwargs: Mapping[str, Any] = field(default_factory=dict)
    per_type_report: bool = True
    scope_order: tuple[str, ...] = ()
    tiny_corpus: Callable[[], list[str]] | None = None
    tiny_vocab_size: int = 1024


#: The entry-point group through which an installed package adds environments: each entry point names a module
#: (imported, so that its ``@register_env`` runs) or a function (called, to register).
ENTRY_POINT_GROUP = "skillduet.envs"


def _discover() -> None:
    """Import every built-in environment package (each registers itself), then load the ``skillduet.envs``
    entry points of installed packages."""
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.ispkg:
            importlib.import_module(f"skillduet_plugin.envs.{info.name}")
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        loaded = entry.load()
        if callable(loaded):
            loaded()


ENVS: Registry[EnvSpec] = Registry("env", "environments", discover=_discover)


def register_env(name: str, target: str | Callable[..., Any] | None = None, *, replace_existing: bool = True,
                 **spec: Any) -> Any:
    """Register an environment.

    As a decorator on the factory: ``@register_env("mine", prompts=..., default_panel="valid")``. Directly:
    ``register_env("mine", "package.module:make_mine", **spec)`` (a factory string, resolved when an env is
    made, so that the module is imported only when used).
    """
    def add(factory: Any) -> Any:
        if isinstance(factory, str):
            path = factory
            made = EnvSpec(name=name, factory=lambda **kw: resolve_target(path)(**kw), target=path, **spec)
        else:
            made = EnvSpec(name=name, factory=factory,
                           target=f"{factory.__module__}:{factory.__qualname__}", **spec)
        ENVS.register(name, made, replace=replace_existing)
        return factory

    return add if target is None else add(target)


def env_spec(name: str) -> EnvSpec:
    """The registration of ``name``; an unknown name is a one-line error listing the registered ones."""
    return ENVS.get(name)


def env_names() -> list[str]:
    return ENVS.names()


def with_overrides(spec: EnvSpec, **changes: Any) -> EnvSpec:
    """A copy of ``spec`` with some fields replaced (e.g. custom prompt functions from a verl config)."""
    return replace(spec, **{k: v for k, v in changes.items() if v is not None})


__all__ = ["ENTRY_POINT_GROUP", "ENVS", "EnvSpec", "env_names", "env_spec", "register_env", "with_overrides"]
