"""Test support, never imported by the product: the toy pool, fault-injecting LLM backends, verl's CPU platform
shim (``verl_cpu``, which patches verl when imported). The tiny model the tests use is the demo's model,
``skillduet_plugin.warmstart.tiny_model``."""
