"""A PyTorch Lightning profiler that writes a Neuron Explorer run per `fit`.

    from neuron_explorer.integrations.lightning import NeuronExplorerProfiler
    trainer = Trainer(profiler=NeuronExplorerProfiler("runs/pl"), max_epochs=1)

Built on `lightning.pytorch` when that package is installed, else on `pytorch_lightning` (the
`lightning` extra installs the latter); a Trainer accepts only profilers of its own package.
Under DDP every rank writes its partition of the same run, as `nx.profile` does.
Must not: change the training (it only observes the Trainer's actions).
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

try:
    from lightning.pytorch.profilers import Profiler
except ImportError:
    from pytorch_lightning.profilers import Profiler

from . import StepRecorder

STEP_ACTION = "run_training_batch"
"""The Trainer action that ends one training batch (forward, backward and optimizer step)."""


class NeuronExplorerProfiler(Profiler):
    """Record training batches of each `fit` into a run: after `wait` batches and `warmup` more,
    `active` batches are recorded (`repeat` cycles; 0 keeps cycling until fit ends). The first fit
    writes `<dirpath>/fit-<filename>`, later fits `…-2`, `…-3` (and a later run of the script the
    next free ones, unless `overwrite`); `dirpath` defaults to the Trainer's log directory. Where
    each run went is printed on stderr and written in the summary. `run_dirs` lists the runs written. Other keyword arguments go to
    `nx.profile` (activities, with_stack, profile_memory, ...)."""

    def __init__(self, dirpath: Path | str | None = None, filename: str = "neuron-explorer", *, wait: int = 1, warmup: int = 1,
                 active: int = 3, repeat: int = 1, overwrite: bool = False, **profile_kwargs):
        super().__init__(dirpath=dirpath, filename=filename)
        self._recorder = StepRecorder(wait=wait, warmup=warmup, active=active, repeat=repeat, overwrite=overwrite,
                                      profile_kwargs=profile_kwargs)
        self._fits = 0
        self.run_dirs: list[Path] = []

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage, local_rank, log_dir)
        if stage != "fit" or self._recorder.recording:
            return
        self._fits += 1
        name = f"fit-{self.filename}" + (f"-{self._fits}" if self._fits > 1 else "")
        self._recorder.start(Path(self.dirpath or ".") / name)

    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        if action_name == STEP_ACTION:
            was_recording = self._recorder.recording
            self._recorder.step()
            if was_recording and not self._recorder.recording:  # the last cycle ended: its run is written
                self.run_dirs.append(self._recorder.run_dir)

    @contextmanager
    def profile(self, action_name: str) -> Generator:
        try:
            with super().profile(action_name):
                yield action_name
        except BaseException as e:
            if action_name == STEP_ACTION:  # the batch failed: Lightning tells profilers nothing more
                self._finish(e)
            raise

    def _finish(self, error: BaseException | None = None) -> None:
        if self._recorder.recording:
            run_dir = self._recorder.stop(error)
            if run_dir is not None:
                self.run_dirs.append(run_dir)

    def summary(self) -> str:
        self._finish()  # the Trainer asks for the summary when fit ends
        # a line of its own: Lightning appends each fit's summary to the same <stage>-<filename>.txt
        return f"Neuron Explorer run: {self.run_dirs[-1]}\n" if self.run_dirs else ""

    def teardown(self, stage: str | None) -> None:
        self._finish()  # also when fit ended early: the run of what was recorded
        super().teardown(stage)
