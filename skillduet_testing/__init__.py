"""Test support for a source checkout, not part of the installed ``skillduet`` package (the wheel holds
``skillduet_plugin`` only) and never imported by it: the toy pool, fault-injecting LLM backends, verl's CPU
platform shim (``verl_cpu``, which patches verl when imported), a CPU rollout backend and the tiny CPU runs of
verl's ``main_ppo``. Importable from the checkout's root (pytest's ``pythonpath``; the verl runs put the root on
the ``PYTHONPATH`` of every Ray worker). The tiny model the tests use is the demo's model,
``skillduet_plugin.warmstart.tiny_model``."""
