"""Neuron Explorer inside training frameworks: each integration drives one `nx.profile` from the
framework's own hooks (start, a profiler step per optimizer step, stop writes the run).

- `neuron_explorer.integrations.huggingface.NeuronExplorerCallback`: a transformers Trainer
  callback (extra `huggingface`).
- `neuron_explorer.integrations.lightning.NeuronExplorerProfiler`: a PyTorch Lightning profiler
  (extra `lightning`).

Each is its own module so that importing one never imports the other framework.
Must not: change what the profiler records (collectors/torch_profiler.py decides).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError


class StepRecorder:
    """One recording of chosen training steps: `wait` steps skipped, `warmup` steps profiled and
    thrown away, then `active` steps recorded, `repeat` times (0: until training ends).

    With `repeat` > 0 the run is written as soon as its last cycle ends, so a failure later in
    training cannot lose it and the profiler does not outlive the steps it was asked for.
    """

    def __init__(self, *, wait: int, warmup: int, active: int, repeat: int, overwrite: bool, profile_kwargs: dict):
        if min(wait, warmup, repeat) < 0 or active < 1:
            raise UsageError("wait, warmup and repeat must not be negative, and active must be at least 1")
        self.schedule_options = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
        self.last_step = (wait + warmup + active) * repeat if repeat else None
        self.overwrite = overwrite
        self.profile_kwargs = profile_kwargs
        self._prof = None
        self._steps = 0
        self.run_dir: Path | None = None

    @property
    def recording(self) -> bool:
        return self._prof is not None

    def start(self, run_dir: Path | str) -> None:
        import torch.profiler as tp

        from ..collectors.torch_profiler import profile

        self.stop()  # a recording an earlier training left open (it failed inside the window) is written first
        self._prof = profile(run_dir, schedule=tp.schedule(**self.schedule_options), overwrite=self.overwrite, **self.profile_kwargs)
        self._steps = 0
        self._prof.start()

    def step(self) -> None:
        if self._prof is None:
            return
        self._prof.step()
        self._steps += 1
        if self.last_step is not None and self._steps >= self.last_step:
            self.stop()

    def stop(self, error: BaseException | None = None) -> Path | None:
        """Stop and write the run (once; later calls return the same path). With the `error` that
        ended training, the run's manifest says so."""
        if self._prof is not None:
            prof, self._prof = self._prof, None
            if error is not None:
                prof.__exit__(type(error), error, error.__traceback__)  # the run notes how the profiled code ended
            else:
                prof.stop()
            self.run_dir = prof.run_dir
        return self.run_dir
