"""Framework-free multi-turn episode collection with environment-token masks."""
