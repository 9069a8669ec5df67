"""The WebShop text environment: search page, results, item pages and purchase, behind the ``TextEnv`` contract.

Actions are ``search[query]`` (from any page, as in the benchmark) and ``click[x]`` for a clickable ``x`` of the
current page (case-insensitive). Anything else leaves the page unchanged with reward 0. ``click[buy now]`` ends
the episode with the purchase reward; so does the step limit (reward 0). Goal ``i`` of the shuffled goal list
is task id ``str(i)``; ids 0-499 are ``test``, 500-1,499 ``eval``, 1,500 on ``train``.

The search page admits ``search[<your query>]`` (free text, as the benchmark). With ``search_choices=N`` it
lists instead up to N ready-made ``search[query]`` actions built from the instruction (``queries.
candidate_queries``), so that a policy choosing among admissible actions (choose mode) can search; any other
query still works. With ``result_labels=True`` (choose mode's default) a results page offers its product links
as ``click[item k]`` (k = the product's row on the page, 1-10) instead of ``click[<asin>]``: a small policy then
picks a row, which it can learn from any goal, rather than spelling a random asin it must copy from the page.
Both forms are accepted whatever the setting; observations always show the asins, as the benchmark's pages do.
"""

from __future__ import annotations

from typing import Any

from skillduet_plugin.envs.base import TextEnv
from skillduet_plugin.envs.webshop import pages
from skillduet_plugin.envs.webshop.actions import labelled_row, parse_action, row_action
from skillduet_plugin.envs.webshop.catalogue import Catalogue
from skillduet_plugin.envs.webshop.expert import searching_shopper
from skillduet_plugin.envs.webshop.queries import candidate_queries
from skillduet_plugin.envs.webshop.reward import get_reward

SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10
SPLITS = {"test": (0, 500), "eval": (500, 1500), "train": (1500, None), "all": (0, None)}
SCOPES = ("webshop", "category", "product_category")
OBSERVATION_MODES = ("text", "text_rich")


class WebShopEnv(TextEnv):
    """One WebShop session at a time over a shared :class:`Catalogue` and a goal split."""

    name = "webshop"

    def __init__(self, catalogue: Catalogue, split: str = "test", observation_mode: str = "text",
                 max_steps: int = 15, scope: str = "webshop", show_attrs: bool = False,
                 search_choices: int = 0, result_labels: bool = False) -> None:
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is unknown: use one of {', '.join(SPLITS)}")
        if observation_mode not in OBSERVATION_MODES:
            raise ValueError(f"observation_mode={observation_mode!r} is unsupported: use "
                             f"{' or '.join(OBSERVATION_MODES)}")
        if scope not in SCOPES:
            raise ValueError(f"scope={scope!r} is unknown: use one of {', '.join(SCOPES)}")
        if max_steps < 1:
            raise ValueError(f"max_steps={max_steps} must be >= 1")
        if isinstance(search_choices, bool) or not isinstance(search_choices, int) or search_choices < 0:
            raise ValueError(f"search_choices={search_choices!r} must be an integer >= 0 (0: free-text search)")
        if not isinstance(result_labels, bool):
            raise ValueError(f"result_labels={result_labels!r} must be true or false")
        start, stop = SPLITS[split]
        stop = len(catalogue.goals) if stop is None else min(stop, len(catalogue.goals))
        if start >= stop:
            raise ValueError(f"split={split!r} is empty: the catalogue has {len(catalogue.goals)} goals and "
                             f"{split} starts at goal {start}; use a larger catalogue or split='test'")
        self.catalogue = catalogue
        self.split = split
        self.observation_mode = observation_mode
        self.max_steps = max_steps
        self.scope = scope
        self.show_attrs = show_attrs
        self.search_choices = search_choices
        self.result_labels = result_labels
        self._tasks = [str(i) for i in range(start, stop)]
        self._task_set = set(self._tasks)
        self._session: dict[str, Any] | None = None

    # ------------------------------------------------------------------ contract
    @property
    def tasks(self) -> list[str]:
        return list(self._tasks)

    def goal(self, task_id: str) -> dict[str, Any]:
        """The goal behind ``task_id`` (a copy; ``instruction`` mirrors ``instruction_text``)."""
        goal = dict(self.catalogue.goals[self._goal_index(task_id)])
        goal["instruction"] = goal["instruction_text"]
        return goal

    def searching_expert(self, task_id: str, seed: int = 0) -> Any:
        """A fresh searching expert for one episode of ``task_id`` (``envs.webshop.expert``): it reads the
        instruction only, never the goal's product or options."""
        return searching_shopper(self.goal(task_id)["instruction_text"], seed)

    def task_type(self, task_id: str) -> str:
        goal = self.catalogue.goals[self._goal_index(task_id)]
        if self.scope == "category":
            return goal["category"] or "webshop"
        if self.scope == "product_category":
            return goal["product_category"].split("›")[0].strip() or "webshop"
        return "webshop"

    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        goal = self.catalogue.goals[self._goal_index(task_id)]
        self._session = {
            "task_id": str(task_id), "goal": goal, "step": 0, "done": False, "won": False, "score": 0.0,
            "reward_info": None, "sub_page": None, "last_obs": "",
        }
        self._go_index()
        obs = self._observe()
        return obs, self._info(obs)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        s = self._session
        if s is None:
            raise RuntimeError("call reset(task_id) before step()")
        if s["done"]:
            return s["last_obs"], 0.0, True, self._info(s["last_obs"])
        s["step"] += 1
        reward = self._apply(action)
        if not s["done"] and s["step"] >= self.max_steps:
            s["done"] = True
        obs = self._observe()
        return obs, reward, s["done"], self._info(obs)

    # ------------------------------------------------------------------ navigation
    def _apply(self, action: str) -> float:
        s = self._session
        name, arg = parse_action(action)
        if name == "search" and arg:
            self._go_results(arg.split(" "), 1)
            return 0.0
        table = pages.clickables(s["elements"])
        row = labelled_row(arg) if name == "click" and s["page"] == "search_results" else None
        if row is not None:
            links = self._links()
            arg = links[row - 1] if 1 <= row <= len(links) else arg
        if name != "click" or arg is None or arg not in table or arg == "search":
            return 0.0
        page = s["page"]
        if arg == pages.BUY_NOW.lower():
            return self._buy()
        if arg == pages.BACK_TO_SEARCH.lower():
            self._go_index()
        elif arg == pages.NEXT_PAGE.lower() and page == "search_results":
            self._go_results(s["keywords"], s["page_no"] + 1)
        elif arg == pages.PREV_PAGE.lower() and page == "search_results":
            self._go_results(s["keywords"], s["page_no"] - 1)
        elif arg == pages.PREV_PAGE.lower() and page == "item_sub_page":
            self._go_item()
        elif arg == pages.PREV_PAGE.lower() and page == "item_page":
            self._go_results(s["keywords"], s["page_no"])
        elif arg in [p.lower() for p in pages.SUB_PAGES]:
            s["sub_page"] = next(p for p in pages.SUB_PAGES if p.lower() == arg)
            s["page"] = "item_sub_page"
            s["elements"] = pages.sub_page(self._instruction, self._product, s["sub_page"])
        else:
            element = table[arg]
            if element.kind == "link":
                s["asin"] = arg.upper()
                s["asins"].add(s["asin"])
            elif element.kind == "option":
                s["options"][element.name] = arg
            self._go_item()
        return 0.0

    def _links(self) -> list[str]:
        """The product links of the current results page, in row order (lowercased asins)."""
        return [e.text.lower() for e in self._session["elements"] if e.kind == "link"]

    def _go_index(self) -> None:
        s = self._session
        s.update(page="index", keywords=None, page_no=None, asin=None, asins=set(), options={},
                 results=[], results_query=None, elements=pages.index_page(self._instruction))

    def _go_results(self, keywords: list[str], page_no: int) -> None:
        s = self._session
        query = " ".join(keywords)
        if s.get("results_query") != query:  # paging re-runs the same (deterministic) search: reuse it
            s["results"] = self.catalogue.search(query, SEARCH_RETURN_N)
            s["results_query"] = query
        s.update(page="search_results", keywords=keywords, page_no=page_no, asin=None, options={})
        window = s["results"][(page_no - 1) * PRODUCT_WINDOW: page_no * PRODUCT_WINDOW]
        s["elements"] = pages.results_page(self._instruction, window, page_no, len(s["results"]))

    def _go_item(self) -> None:
        s = self._session
        s["page"] = "item_page"
        s["elements"] = pages.item_page(self._instruction, self._product, self.show_attrs)

    def _buy(self) -> float:
        s = self._session
        reward, info = get_reward(s["goal"], self._product, dict(s["options"]),
                                  price=self.catalogue.prices[s["asin"]])
        s.update(page="done", done=True, score=reward, won=reward == 1.0, reward_info=info,
                 elements=pages.done_page(s["asin"], s["options"], reward))
        return reward

    # ------------------------------------------------------------------ views
    @property
    def _instruction(self) -> str:
        return self._session["goal"]["instruction_text"]

    @property
    def _product(self) -> dict[str, Any]:
        return self.catalogue.by_asin[self._session["asin"]]

    def _goal_index(self, task_id: str) -> int:
        if str(task_id) not in self._task_set:
            raise KeyError(f"task_id={task_id!r} is not in the {self.split} split "
                           f"(ids {self._tasks[0]}..{self._tasks[-1]})")
        return int(task_id)

    def available_actions(self) -> dict[str, Any]:
        """The benchmark's view: ``has_search_bar`` and the clickable names of the current page."""
        s = self._session
        return {"has_search_bar": s["page"] == "index", "clickables": list(pages.clickables(s["elements"]))}

    def _observe(self) -> str:
        s = self._session
        if self.observation_mode == "text":
            obs = pages.render_text(s["elements"])
        else:
            obs = pages.render_text_rich(s["elements"], s["options"], s["asins"])
        s["last_obs"] = obs
        return obs

    def _info(self, obs: str) -> dict[str, Any]:
        s = self._session
        available = self.available_actions()
        admissible = []
        if available["has_search_bar"]:
            admissible = ([f"search[{q}]" for q in candidate_queries(self._instruction, self.search_choices)]
                          if self.search_choices else ["search[<your query>]"])
        if not s["done"]:
            rows = {a: k for k, a in enumerate(self._links(), 1)} if self.result_labels else {}
            admissible += [row_action(rows[c]) if c in rows else f"click[{c}]"
                           for c in available["clickables"] if c != "search"]
        else:
            admissible = []
        return {
            "admissible_actions": admissible, "available_actions": available,
            "won": bool(s["done"] and s["won"]), "score": float(s["score"]),
            "task_type": self.task_type(s["task_id"]), "task": self._instruction, "step": s["step"],
            "page": s["page"], "asin": s["asin"], "options": dict(s["options"]), "keywords": s["keywords"],
            "results_page": s["page_no"],
            "reward_info": s["reward_info"], "goal_index": int(s["task_id"]),
        }
