"""The warm start: the built-in tiny model (``tiny_model``), expert episodes turned into cloning data
(``episodes``), the cloning loss (``loss``) computed per episode by worker processes (``workers``), and the cache
of warm-started models (``cache``). Below the run tooling: nothing here imports ``runs``."""

#: The experts a warm start can clone (``warm_start.expert``): the searching player, or the game's walkthrough.
EXPERTS = ("search", "walkthrough")
#: The warm start's designs (``warm_start.design``): ``search`` (a share of the episodes carries a skill section) or
#: ``reading`` (per game the same game's Local skill, stand-in skills and none: ``warmstart.reading``).
DESIGNS = ("search", "reading")
#: The Local skill budget (tokens) of a cloning episode's ``## Hindsight skill`` section; the CPU demo's teacher
#: uses the same (``runs.config.DEMO_SKILLDUET``): a clone reads a section as long as those it was cloned on.
LOCAL_SKILL_TOKENS = 96
