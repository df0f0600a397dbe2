"""`python -m neuron_explorer ...` runs the CLI (torchrun -m neuron_explorer record ... uses this)."""

from .cli import main

main()
