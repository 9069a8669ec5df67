"""Adapters that plug SkillDuet into existing trainers (TRL, verl). No algorithm lives here."""
