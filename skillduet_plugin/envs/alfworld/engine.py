"""The real ALFWorld engine (TextWorld ``PddlEnv`` + ALFWorld's demangler/info wrappers) with per-process caches.

A reset of TextWorld's PDDL engine re-parses the game's grammar (on load) and translates PDDL to SAS twice
(on every reset, once more optimised for the planner), and every step re-parses the grammar snippets of each
admissible command. All of these are pure functions of the text, so they are memoised here per process (about
2 MB per cached game, at most ``MAX_CACHED_GAMES``), and the planner's translation is skipped during play. The
game itself (state, feedback text, admissible commands, goal check) is untouched: observations are the
engine's own, byte for byte. Planner calls (``policy_commands``) are never requested during play.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import threading
from collections import OrderedDict
from typing import Any, Callable, Iterator

import fast_downward

_LOCK = threading.RLock()
MAX_CACHED_GAMES = 128


class _LRU(OrderedDict):
    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def get_or_make(self, key: Any, make: Callable[[], Any]) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = make()
        self[key] = value
        while len(self) > self.maxsize:
            self.popitem(last=False)
        return value


# Keyed by a digest of the game text; the cached objects are only read by the engine (verified on textworld 1.7:
# GameLogic gains already-known types idempotently, the translated task is read-only).
_LOGIC_CACHE = _LRU(MAX_CACHED_GAMES)
_SAS_CACHE = _LRU(2 * MAX_CACHED_GAMES)
_MEMO_GAMES = 16  # games whose command texts are kept per cached logic
_PARSE_CACHE = _LRU(8192)  # grammar right-hand sides and query snippets, mostly shared by all games


def _digest(*texts: str) -> str:
    h = hashlib.sha1()
    for text in texts:
        h.update(text.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def _memoised_parser(parse: Callable[..., Any], tag: str) -> Callable[..., Any]:
    """``parse`` (a pure text -> object parser) answered from a cache; callers mutate the result, so each call
    gets its own deep copy."""

    def cached(text: str, *args: Any, **kwargs: Any) -> Any:
        key = (tag, text, args, tuple(sorted(kwargs.items())))
        return copy.deepcopy(_PARSE_CACHE.get_or_make(key, lambda: parse(text, *args, **kwargs)))

    return cached


def _memoise_commands(logic: Any) -> Any:
    """``logic`` whose grammar derives each admissible command's text once per loaded game, template and binding.

    TextWorld derives the text of every applicable action at every step, deep-copying the derivation context for
    each symbol (most of a step's time in a real ALFWorld room). A command template reads only its arguments
    (``take {o} from {r}``) and, for ``go to``, where receptacles stand, which no action changes; so within one
    game the text is a function of the template and the binding. The display names come from the game's entity
    infos (two trials of one scene name the same object ``mug 1`` and ``mug 3``), and one logic serves every game
    with its grammar, so the texts are kept per entity-infos object (the last ``_MEMO_GAMES`` of them, each held
    so that its id cannot be reused). TextWorld's ``PddlEnv.load`` builds that object (the demangler renames it
    in place) and ``reset`` keeps it, so the texts are reused by every episode reset on one load: the rollouts of
    a group, since ``EngineSession.reset`` skips the load when the same game is reset again. They are not reused
    after a reload (``reload=True``, or another game loaded in between) nor by another engine session: each load
    starts an empty memo. Any other derivation (feedback, the intro) is computed as before.
    """
    grammar = logic.grammar
    derive = grammar.derive
    templates = {action.template for action in logic.actions.values()}
    games: OrderedDict[int, tuple[Any, dict[Any, str]]] = OrderedDict()
    lock = threading.Lock()

    def derive_command(start: str, context: Any = None) -> str:
        context = context or {}
        mapping, infos = context.get("mapping"), context.get("entity_infos")
        if start not in templates or mapping is None or infos is None:
            return derive(start, context)
        with lock:
            held = games.get(id(infos))
            if held is None:
                held = games[id(infos)] = (infos, {})
                while len(games) > _MEMO_GAMES:
                    games.popitem(last=False)
            else:
                games.move_to_end(id(infos))
        texts = held[1]
        key = (start, tuple(sorted((ph.name, var.name) for ph, var in mapping.items())))
        text = texts.get(key)
        if text is None:
            text = texts[key] = derive(start, context)
        return text

    grammar.derive = derive_command
    return logic


@contextlib.contextmanager
def _memoised_engine_parsing(*, planning: bool) -> Iterator[None]:
    """Route TextWorld's text parsing and PDDL->SAS translation through the caches, for one call.

    Cached: the game's grammar (parsed on load), the PDDL->SAS translations (on every reset), and the small
    grammar/query snippets the text generator re-parses for every admissible command (on every step).
    Without ``planning`` the planner-optimised translation (used only to replan, i.e. for ``policy_commands``)
    is answered with the plain translation of the same problem: it is never searched during play, and this
    halves the cost of a first reset.
    """
    import textworld.envs.pddl.logic as pddl_logic  # lazy: textworld
    import textworld.envs.pddl.textgen as textgen  # lazy: textworld
    import textworld.logic as tw_logic  # lazy: textworld

    real = (pddl_logic.GameLogic, fast_downward.pddl2sas, textgen._parse_and_convert, tw_logic._parse_and_convert)
    real_logic, real_pddl2sas = real[0], real[1]

    def cached_logic(domain: str, grammar: str):
        return _LOGIC_CACHE.get_or_make(_digest(domain, grammar),
                                        lambda: _memoise_commands(real_logic(domain=domain, grammar=grammar)))

    def cached_pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        optimize = bool(optimize) and planning
        return _SAS_CACHE.get_or_make((_digest(domain, problem), optimize),
                                      lambda: real_pddl2sas(domain, problem, verbose=verbose, optimize=optimize))

    with _LOCK:
        pddl_logic.GameLogic, fast_downward.pddl2sas = cached_logic, cached_pddl2sas
        textgen._parse_and_convert = _memoised_parser(real[2], "textgen")
        tw_logic._parse_and_convert = _memoised_parser(real[3], "logic")
        try:
            yield
        finally:
            (pddl_logic.GameLogic, fast_downward.pddl2sas, textgen._parse_and_convert,
             tw_logic._parse_and_convert) = real


def import_engine() -> tuple[Any, Any, Any]:
    """``(AlfredDemangler, AlfredInfos, PddlEnv)``, without leaking alfworld's import-time side effect.

    Importing ``alfworld`` sets ``os.environ["ALFWORLD_DATA"]`` to ``~/.cache/alfworld`` when it is unset; the
    variable is restored so that it keeps meaning "the user's data" for this process and its workers.
    """
    before = os.environ.get("ALFWORLD_DATA")
    try:
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos  # lazy: alfworld
        from textworld.envs.pddl import PddlEnv  # lazy: textworld
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("the ALFWorld env needs `pip install alfworld==0.4.2` (textworld[pddl], "
                          f"fast-downward-textworld): {exc}") from exc
    finally:
        if before is None:
            os.environ.pop("ALFWORLD_DATA", None)
    return AlfredDemangler, AlfredInfos, PddlEnv


def user_alfworld_data() -> str | None:
    """``$ALFWORLD_DATA`` unless it is alfworld's own empty default (set as a side effect of importing it)."""
    value = os.environ.get("ALFWORLD_DATA")
    if not value:
        return None
    path = os.path.expanduser(value)
    if path == os.path.expanduser("~/.cache/alfworld") and not os.path.isdir(os.path.join(path, "json_2.1.1")):
        return None
    return value


def request_infos(*, policy_commands: bool = False):
    """The ``EnvInfos`` the adapter asks for: win flag, score and admissible commands (planner only if asked)."""
    import textworld  # lazy: textworld

    return textworld.EnvInfos(won=True, admissible_commands=True, score=True, policy_commands=policy_commands,
                              extras=["gamefile"])


class EngineSession:
    """One TextWorld PDDL engine (its own copy of the planner library), reloaded per game file.

    ``load`` is skipped when the same game is reset again, so a group of rollouts of one task pays the parse once.
    """

    def __init__(self, *, policy_commands: bool = False) -> None:
        AlfredDemangler, AlfredInfos, PddlEnv = import_engine()
        self._env = AlfredInfos(AlfredDemangler(PddlEnv(request_infos(policy_commands=policy_commands))))
        self._loaded: str | None = None
        self._planning = policy_commands

    def reset(self, gamefile: str, *, reload: bool = False):
        """Load (if needed, or if ``reload``) and reset ``gamefile``; returns TextWorld's ``GameState``."""
        with _memoised_engine_parsing(planning=self._planning):
            if reload or self._loaded != gamefile:
                self._loaded = None
                self._env.load(gamefile)
                self._loaded = gamefile
            return self._env.reset()

    def step(self, command: str):
        """One engine step; returns ``(GameState, score, done)`` as TextWorld does."""
        with _memoised_engine_parsing(planning=self._planning):
            return self._env.step(command)

    def close(self) -> None:
        self._env.close()
        self._loaded = None
