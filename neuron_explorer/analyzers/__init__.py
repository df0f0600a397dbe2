"""analyzers (see DESIGN.md)."""
