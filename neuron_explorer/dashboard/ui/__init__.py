"""The dashboard drawn: figures, layout and callbacks, from what the views return.

Must not: query the run (the views do), or compute a figure.
"""
