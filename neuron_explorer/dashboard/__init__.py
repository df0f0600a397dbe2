"""dashboard (see DESIGN.md)."""
