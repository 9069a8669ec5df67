"""The environment registry: everything the rest of SkillDuet needs to know about one environment, by name.

An environment is one package under ``envs/`` (or any module of yours) whose factory carries
``@register_env(name, ...)``: the factory, its prompt pieces, how a response becomes an action and its expert for
the warm start. What other layers need from an environment they register themselves against its name (the
offline analyzer's rules: ``llm.offline_common.register_offline_rules``; ``skillduet train``'s presets:
``runs.env_defaults.register_run_defaults``), so that nothing here names a module above ``envs/``; anything else an
environment's package wants known about it goes in ``extras``. ``skillduet envs show NAME`` prints all of it.
Nothing outside ``envs/`` tests an environment's name: it asks :func:`env_spec`. The built-in packages register
themselves on the first lookup, and an installed package adds its own through the ``skillduet.envs`` entry-point
group.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from skillduet_plugin.core.registry import Registry, loading_entry_point, resolve_target

if TYPE_CHECKING:  # pragma: no cover
    from skillduet_plugin.envs.base import TextEnv
    from skillduet_plugin.envs.templates import PromptTemplates


@dataclass(frozen=True)
class EnvPrompts:
    """How prompts show an environment.

    Attributes:
        templates: the pieces of the standard verl-agent prompt (``envs.prompts``); None: the standard prompt with
            a neutral role (``envs.prompts.DEFAULT_TEMPLATES``), or ``initial_messages`` builds the prompts.
        format_observation: ``(obs, task) -> text`` as prompts show an observation (default: stripped).
        format_actions: ``(admissible) -> shown actions`` (default: as given, ``help`` dropped).
        initial_messages / turn_message: replace the standard prompt builder (same signatures as
            ``envs.prompts.initial_messages`` / ``turn_message``).
    """

    templates: "PromptTemplates | None" = None
    format_observation: Callable[[str, str | None], str] | None = None
    format_actions: Callable[[Sequence[str]], list[str]] | None = None
    initial_messages: Callable[..., list[dict[str, str]]] | None = None
    turn_message: Callable[..., str] | None = None


@dataclass(frozen=True)
class EnvActions:
    """How a response becomes an action.

    Attributes:
        project_action: replaces the standard ``<action>`` parser (same signature as
            ``envs.projection.project_action``).
        free_text_actions: actions are free text (WebShop's ``search[...]``): a response need not be one of the
            admissible strings, and ``action_selection=auto`` generates instead of choosing.
        choose_kwargs: factory keywords added when the policy chooses among admissible actions (``choose`` mode).
    """

    project_action: Callable[..., tuple[str, bool]] | None = None
    free_text_actions: bool = False
    choose_kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvData:
    """Which tasks a run gets.

    Attributes:
        default_panel: the evaluation split when a run names none.
        limit_keyword: the factory keyword that keeps the first N tasks (None: callers cut ``env.tasks``).
        default_data_identity: ``() -> dict`` naming what ``data_dir=None`` loads (a data folder from the
            environment, or the generator's version), so caches keyed on the data notice when it changes.
    """

    default_panel: str = "test"
    limit_keyword: str | None = None
    default_data_identity: Callable[[], dict[str, Any]] | None = None


@dataclass(frozen=True)
class EnvReport:
    """How evaluation tables show an environment.

    Attributes:
        per_type_report: a column per task type (else score and success).
        scope_order: the order of task types in reports (and the types ``task_types=`` may keep).
    """

    per_type_report: bool = True
    scope_order: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnvSpec:
    """One registered environment: what it is. What other layers need from it (the offline analyzer's rules, run
    presets, a tiny model's corpus) they register themselves against ``name``.

    Attributes:
        name: the registry name (``env=``, ``env_name=``, ``skillduet.env.name=``).
        factory: ``factory(data_dir=None, split=..., **kw) -> TextEnv``.
        target: ``"module:function"`` of the factory, which spawned pool workers import.
        prompts / actions / data / report: see :class:`EnvPrompts`, :class:`EnvActions`, :class:`EnvData`,
            :class:`EnvReport`.
        make_expert: the warm start's expert, ``(env, task_id, kind, seed) -> expert(obs, info, turn) -> action``
            (``kind`` is ``warm_start.expert``); None: no warm start for this env.
        description: one line on what the environment is (default: the first paragraph of the factory's
            docstring, else of its module's).
        task_types: the task types (scopes) its tasks have, as ``info["task_type"]`` names them.
        extras: anything else its package wants shown by ``skillduet envs show`` (name -> value).
        provider: who registered it: ``built-in``, the installed package's entry point, or the module.
    """

    name: str
    factory: Callable[..., "TextEnv"]
    target: str
    prompts: EnvPrompts = field(default_factory=EnvPrompts)
    actions: EnvActions = field(default_factory=EnvActions)
    data: EnvData = field(default_factory=EnvData)
    report: EnvReport = field(default_factory=EnvReport)
    make_expert: Callable[..., Callable[[str, dict, int], str]] | None = None
    description: str = ""
    task_types: tuple[str, ...] = ()
    extras: Mapping[str, Any] = field(default_factory=dict)
    provider: str = ""


#: ``register_env``'s keywords that are ``EnvSpec`` fields themselves
_TOP_LEVEL = ("make_expert", "description", "task_types", "extras")
#: ``register_env``'s keywords, by the part of the registration they fill (``prompts=`` is the templates)
_PARTS: dict[str, tuple[type, dict[str, str]]] = {
    "prompts": (EnvPrompts, {"prompts": "templates", "format_observation": "format_observation",
                             "format_actions": "format_actions", "initial_messages": "initial_messages",
                             "turn_message": "turn_message"}),
    "actions": (EnvActions, {"project_action": "project_action", "free_text_actions": "free_text_actions",
                             "choose_kwargs": "choose_kwargs"}),
    "data": (EnvData, {"default_panel": "default_panel", "limit_keyword": "limit_keyword",
                       "default_data_identity": "default_data_identity"}),
    "report": (EnvReport, {"per_type_report": "per_type_report", "scope_order": "scope_order"}),
}


def _spec_fields(name: str, keywords: Mapping[str, Any]) -> dict[str, Any]:
    """``EnvSpec`` fields from ``register_env``'s flat keywords (``default_panel="valid"``) or whole parts
    (``data=EnvData(...)``); an unknown keyword is a one-line error listing the known ones."""
    values: dict[str, dict[str, Any]] = {part: {} for part in _PARTS}
    out: dict[str, Any] = {}
    for key, value in keywords.items():
        part = _PARTS.get(key)
        if part is not None and isinstance(value, part[0]):
            out[key] = value
        elif key in _TOP_LEVEL:
            out[key] = tuple(value) if key == "task_types" else dict(value) if key == "extras" else value
        else:
            owner = next((p for p, (_, names) in _PARTS.items() if key in names), None)
            if owner is None:
                known = sorted({k for _, names in _PARTS.values() for k in names} | set(_TOP_LEVEL))
                raise TypeError(f"register_env({name!r}): unknown keyword {key!r}; known: {', '.join(known)}")
            values[owner][_PARTS[owner][1][key]] = value
    for part, given in values.items():
        if given:
            base = out.get(part, _PARTS[part][0]())
            out[part] = replace(base, **given)
    return out


#: The entry-point group through which an installed package adds environments: each entry point names a module
#: (imported, so that its ``@register_env`` runs) or a function (called, to register).
ENTRY_POINT_GROUP = "skillduet.envs"


def _discover() -> None:
    """Import every built-in environment package (each registers itself); the registry then loads the
    ``skillduet.envs`` entry points of installed packages."""
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.ispkg:
            importlib.import_module(f"skillduet_plugin.envs.{info.name}")


ENVS: Registry[EnvSpec] = Registry("env", "environments", discover=_discover, group=ENTRY_POINT_GROUP)


def register_env(name: str, target: str | Callable[..., Any] | None = None, *, replace_existing: bool = True,
                 **spec: Any) -> Any:
    """Register an environment.

    As a decorator on the factory: ``@register_env("mine", prompts=..., default_panel="valid")``. Directly:
    ``register_env("mine", "package.module:make_mine", **spec)`` (a factory string, resolved when an env is
    made, so that the module is imported only when used).
    """
    fields = _spec_fields(name, spec)

    def add(factory: Any) -> Any:
        if isinstance(factory, str):
            path = factory
            made = EnvSpec(name=name, factory=lambda **kw: resolve_target(path)(**kw), target=path, **fields)
        else:
            doc = inspect.getdoc(factory) or inspect.getdoc(sys.modules.get(factory.__module__)) or ""
            doc = doc.split("\n\n")[0].replace("\n", " ")
            made = EnvSpec(name=name, factory=factory, target=f"{factory.__module__}:{factory.__qualname__}",
                           **{"description": doc, **fields})
        module = made.target.partition(":")[0]
        provider = loading_entry_point() or (
            "built-in" if module.split(".")[0] == "skillduet_plugin" else f"module {module} (no entry point)")
        ENVS.register(name, replace(made, provider=provider), replace=replace_existing)
        return factory

    return add if target is None else add(target)


def env_spec(name: str) -> EnvSpec:
    """The registration of ``name``; an unknown name is a one-line error listing the registered ones."""
    return ENVS.get(name)


def env_names() -> list[str]:
    """The registered environments' names (the first call loads the built-in and installed ones)."""
    return ENVS.names()


def load_environments() -> None:
    """Load every environment, built-in and installed, so that what their modules register against their names
    in other layers' tables (offline rules, run presets, a tiny corpus, the reading design) is there: each such
    table calls this before its first lookup."""
    ENVS.names()


__all__ = ["ENTRY_POINT_GROUP", "ENVS", "EnvActions", "EnvData", "EnvPrompts", "EnvReport", "EnvSpec", "env_names",
           "env_spec", "load_environments", "register_env"]
