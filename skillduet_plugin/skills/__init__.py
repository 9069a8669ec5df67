"""The skill lifecycle, framework-free: data model, bank, extraction, scoring, consolidation, injection."""
