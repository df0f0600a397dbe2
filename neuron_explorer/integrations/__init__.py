"""Neuron Explorer inside training frameworks: each integration drives one `nx.profile` from the
framework's own hooks (start, a profiler step per optimizer step, stop writes the run).

- `neuron_explorer.integrations.huggingface.NeuronExplorerCallback`: a transformers Trainer
  callback (extra `huggingface`).
- `neuron_explorer.integrations.lightning.NeuronExplorerProfiler`: a PyTorch Lightning profiler
  (extra `lightning`).

Each is its own module so that importing one never imports the other framework.

Like the frameworks' own loggers and profilers, running the same script again never fails on the
run the last one wrote: without `overwrite`, a run directory already taken becomes `NAME-2`,
`NAME-3`, ... (`free_run_dir`), and where the run went is printed on stderr when it is written.
Must not: change what the profiler records (collectors/torch_profiler.py decides).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import UsageError


def free_run_dir(target: Path | str, rank: int = 0, shared: bool = False) -> Path:
    """collectors._live_write.free_run_dir (imported when called: importing an integration stays light)."""
    from ..collectors._live_write import free_run_dir as free

    return free(target, rank, shared)


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
        self.asked_dir: Path | None = None
        self.rank = 0

    @property
    def recording(self) -> bool:
        return self._prof is not None

    def start(self, run_dir: Path | str) -> None:
        import torch.profiler as tp

        from ..collectors.torch_profiler import dist_rank, profile

        self.stop()  # a recording an earlier training left open (it failed inside the window) is written first
        self.rank, _, shared = dist_rank()
        self.asked_dir = Path(run_dir)
        if not self.overwrite:
            run_dir = free_run_dir(run_dir, self.rank, shared)
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
            if self.run_dir is not None and self.rank == 0:  # one line per job, not one per rank
                taken = f" ({self.asked_dir} already held a run)" if self.asked_dir is not None and self.run_dir != self.asked_dir else ""
                print(f"neuron-explorer: wrote {self.run_dir}{taken}", file=sys.stderr)
        return self.run_dir
