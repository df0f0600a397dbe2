"""The package's version, in a module of its own so that any layer may read it (the package's
__init__ sits at the top of the layers and imports most of them).

Must not: import anything.
"""

__version__ = "0.2.0"
