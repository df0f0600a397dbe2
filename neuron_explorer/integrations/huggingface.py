"""A Hugging Face transformers `Trainer` callback that records chosen training steps into a run.

    from neuron_explorer.integrations.huggingface import NeuronExplorerCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[NeuronExplorerCallback("runs/hf")])

Needs the `huggingface` extra (transformers and accelerate). Under torchrun every rank writes its
partition of the same run, as `nx.profile` does.
Must not: change the training (it only observes the Trainer's events).
"""

from __future__ import annotations

import os
from pathlib import Path

from transformers import TrainerCallback

from . import StepRecorder


class NeuronExplorerCallback(TrainerCallback):
    """Profile training steps into a Neuron Explorer run: after `wait` optimizer steps and `warmup`
    more, `active` steps are recorded (`repeat` cycles; 0 keeps cycling until training ends). The
    run is written when training ends, to `run_dir` (default: `<output_dir>/neuron-explorer`), or
    when that holds a run already and `overwrite` is off, to the first free `…-2`, `…-3`; where it
    went is printed on stderr and `run_dir` on the callback then says so. Other keyword arguments go to `nx.profile`
    (activities, with_stack, profile_memory, ...)."""

    def __init__(self, run_dir: Path | str | None = None, *, wait: int = 1, warmup: int = 1, active: int = 3, repeat: int = 1,
                 overwrite: bool = False, **profile_kwargs):
        self._target = run_dir
        self._recorder = StepRecorder(wait=wait, warmup=warmup, active=active, repeat=repeat, overwrite=overwrite,
                                      profile_kwargs=profile_kwargs)

    @property
    def run_dir(self) -> Path | None:
        """The run written by the last training (None before it ends)."""
        return self._recorder.run_dir

    def on_train_begin(self, args, state, control, **kwargs):
        target = self._target if self._target is not None else os.path.join(args.output_dir, "neuron-explorer")
        self._recorder.start(target)

    def on_step_end(self, args, state, control, **kwargs):
        self._recorder.step()  # one profiler step per optimizer step (after gradient accumulation)

    def on_train_end(self, args, state, control, **kwargs):
        self._recorder.stop()
