"""Optional integrations, each behind its extra: ``gepa`` (GBC blame inside GEPA)."""
