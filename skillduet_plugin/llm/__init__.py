"""Analyzer and synthesizer LLM backends behind one small interface."""
