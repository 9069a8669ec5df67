"""Helpers for tests and CPU runs: a tiny offline tokenizer and causal LM."""
