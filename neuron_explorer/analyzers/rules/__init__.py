"""One module per rule. Each module's docstring is its entry in docs/RULES.md (see analyzers/docs.py)."""
