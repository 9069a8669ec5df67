"""Everything a ``skillduet train`` / ``skillduet eval`` run needs around the trainer: the run config, the run
directory, the behaviour-cloning warm start, the TRL runner, the evaluation protocol, metrics and plots."""

from skillduet_plugin.runs.config import RunConfig, WarmStartConfig, load_run_config, parse_overrides

__all__ = ["RunConfig", "WarmStartConfig", "load_run_config", "parse_overrides"]
