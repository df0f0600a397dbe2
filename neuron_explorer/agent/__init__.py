"""agent (see DESIGN.md)."""
