"""The framework integrations on tiny models built from code (nothing downloaded): a transformers
Trainer with NeuronExplorerCallback and a Lightning Trainer with NeuronExplorerProfiler each
write a run of the chosen training steps. Skipped only where the extra is not installed
(`pip install -e ".[huggingface,lightning]"`)."""

from __future__ import annotations

import pytest
import torch

import neuron_explorer as nx
from neuron_explorer.errors import NeuronExplorerError

pytestmark = pytest.mark.slow  # tier: imports transformers and lightning and trains


def _steps(run_dir) -> list[int]:
    with nx.open_run(run_dir) as run:
        return [s for (s,) in run.sql("SELECT step FROM steps ORDER BY step").fetchall()]


def _overlaps(run_dir) -> list[int]:
    """Per rank, the slices counted as overlapping another on their thread: none on a clean run (the
    step ends inside the framework's callback, which is no overlap)."""
    with nx.open_run(run_dir) as run:
        return [r["data_quality"]["overlapping_slices"] for r in run.manifest["ranks"]]


def _event_names(run_dir) -> set[str]:
    with nx.open_run(run_dir) as run:
        return {n for (n,) in run.sql("SELECT DISTINCT name FROM events").fetchall()}


# ---- what both drive (no framework needed) ------------------------------------------------------------
def test_step_recorder_writes_the_run_when_its_last_cycle_ends(tmp_path):
    from neuron_explorer.integrations import StepRecorder

    rec = StepRecorder(wait=1, warmup=1, active=2, repeat=1, overwrite=False, profile_kwargs={})
    rec.start(tmp_path / "run")
    model = torch.nn.Linear(8, 4)
    for step in range(6):
        model(torch.randn(4, 8)).sum().backward()
        rec.step()
        assert rec.recording == (step < 3)  # steps 0 (wait), 1 (warmup), 2 and 3 (recorded): done after the 4th
    assert rec.run_dir == tmp_path / "run" and _steps(rec.run_dir) == [2, 3]
    assert not torch._C._autograd._profiler_enabled() and rec.stop() == rec.run_dir  # stopping again changes nothing
    with pytest.raises(NeuronExplorerError):
        StepRecorder(wait=-1, warmup=0, active=1, repeat=1, overwrite=False, profile_kwargs={})


def test_free_run_dir_takes_the_first_name_that_holds_no_run(tmp_path):
    from neuron_explorer.integrations import free_run_dir

    target = tmp_path / "run"
    assert free_run_dir(target) == target  # nothing there
    target.mkdir()
    assert free_run_dir(target) == target  # an empty directory
    (target / "manifest.json").write_text("{}")
    (tmp_path / "run-2").mkdir()
    (tmp_path / "run-2" / "x").write_text("")
    assert free_run_dir(target) == tmp_path / "run-3"
    # a run several ranks write: each rank looks for its own partition, so all ranks of a rerun agree
    (tmp_path / "ddp" / "rank=0").mkdir(parents=True)
    (tmp_path / "ddp" / "rank=1").mkdir()
    (tmp_path / "ddp-2" / "rank=0").mkdir(parents=True)  # a rerun whose rank 0 wrote already
    assert free_run_dir(tmp_path / "ddp", rank=0, shared=True) == tmp_path / "ddp-3"
    assert free_run_dir(tmp_path / "ddp", rank=1, shared=True) == tmp_path / "ddp-2"
    assert free_run_dir(tmp_path / "ddp", rank=2, shared=True) == tmp_path / "ddp"


def test_step_recorder_run_again_writes_beside_and_says_where(tmp_path, capsys):
    from neuron_explorer.integrations import StepRecorder

    model = torch.nn.Linear(8, 4)
    written = []
    for _ in range(2):  # the same script run twice
        rec = StepRecorder(wait=0, warmup=0, active=1, repeat=1, overwrite=False, profile_kwargs={})
        rec.start(tmp_path / "run")
        model(torch.randn(4, 8)).sum().backward()
        rec.step()
        written.append(rec.run_dir)
    assert written == [tmp_path / "run", tmp_path / "run-2"]
    err = capsys.readouterr().err.splitlines()
    assert err == [f"neuron-explorer: wrote {tmp_path / 'run'}",
                   f"neuron-explorer: wrote {tmp_path / 'run-2'} ({tmp_path / 'run'} already held a run)"]
    rec = StepRecorder(wait=0, warmup=0, active=1, repeat=1, overwrite=True, profile_kwargs={})
    rec.start(tmp_path / "run")
    rec.step()
    assert rec.run_dir == tmp_path / "run"  # overwrite: the place asked for


# ---- Hugging Face transformers ------------------------------------------------------------------
def test_trainer_callback_records_the_chosen_steps(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from neuron_explorer.integrations.huggingface import NeuronExplorerCallback

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2))
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (32, 16))]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=7, per_device_train_batch_size=4, report_to="none",
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True)
    callback = NeuronExplorerCallback(wait=2, warmup=1, active=3)  # optimizer steps 3, 4, 5 (counting from 0)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()

    assert callback.run_dir == tmp_path / "out" / "neuron-explorer"  # beside the Trainer's output by default
    assert not torch._C._autograd._profiler_enabled()  # stopped once its cycle ended
    assert _steps(callback.run_dir) == [3, 4, 5]
    assert _overlaps(callback.run_dir) == [0]
    assert {"aten::addmm", "aten::embedding", "Optimizer.step#AdamW.step"} <= _event_names(callback.run_dir)
    with nx.open_run(callback.run_dir) as run:
        passes = {p for (p,) in run.sql("SELECT DISTINCT pass FROM events").fetchall()}
    assert {"forward", "backward", "optimizer"} <= passes  # whole training steps, not only the forward

    again = NeuronExplorerCallback(wait=2, warmup=1, active=1)  # the same script run again: no RunExistsError inside train()
    Trainer(model=model, args=args, train_dataset=data, callbacks=[again]).train()
    assert again.run_dir == tmp_path / "out" / "neuron-explorer-2" and _steps(again.run_dir) == [3]


def test_trainer_callback_checks_its_schedule():
    from neuron_explorer.integrations.huggingface import NeuronExplorerCallback

    with pytest.raises(NeuronExplorerError):
        NeuronExplorerCallback("x", active=0)


# ---- PyTorch Lightning ----------------------------------------------------------------------------
def _lightning():
    try:
        import lightning.pytorch as pl
    except ImportError:  # the test extra installs pytorch-lightning; `lightning` is the same code under another name
        import pytorch_lightning as pl
    return pl


def test_lightning_profiler_writes_a_run_per_fit(tmp_path):
    pl = _lightning()
    from neuron_explorer.integrations.lightning import NeuronExplorerProfiler

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)  # LOSS LINE

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    profiler = NeuronExplorerProfiler(tmp_path / "runs", wait=1, warmup=1, active=2)
    model = Regressor()
    for _ in range(2):
        trainer = pl.Trainer(max_steps=6, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, profiler=profiler,
                             default_root_dir=str(tmp_path))
        trainer.fit(model, data)

    assert profiler.run_dirs == [tmp_path / "runs" / "fit-neuron-explorer", tmp_path / "runs" / "fit-neuron-explorer-2"]
    for run_dir in profiler.run_dirs:
        assert _steps(run_dir) == [2, 3]  # batches 2 and 3 of each fit (counting from 0)
        assert _overlaps(run_dir) == [0]
    loss_line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith("# LOSS LINE"))
    with nx.open_run(profiler.run_dirs[0]) as run:
        lines = run.sql("SELECT DISTINCT f.file, f.line FROM events e JOIN frames f USING (frame_id) "
                        "WHERE e.name = 'aten::addmm' AND f.is_user").fetchall()
    assert (__file__, loss_line) in lines, lines  # the model's matmuls link to the training_step line that ran them

    # the same script run again (a new profiler): the next free names, not RunExistsError from inside fit
    again = NeuronExplorerProfiler(tmp_path / "runs", wait=1, warmup=1, active=2)
    trainer = pl.Trainer(max_steps=6, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, profiler=again, default_root_dir=str(tmp_path))
    trainer.fit(model, data)
    assert again.run_dirs == [tmp_path / "runs" / "fit-neuron-explorer-3"] and _steps(again.run_dirs[0]) == [2, 3]
    [summary] = (tmp_path / "runs").glob("*.txt")  # Lightning appends each fit's summary to one file: one line each
    assert summary.read_text().splitlines() == [f"Neuron Explorer run: {d}" for d in [*profiler.run_dirs, *again.run_dirs]]


def test_lightning_fit_that_fails_in_the_window_still_writes_its_run(tmp_path):
    pl = _lightning()
    from neuron_explorer.integrations.lightning import NeuronExplorerProfiler

    class Failing(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            if batch_idx == 3:
                raise RuntimeError("bad batch")
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    profiler = NeuronExplorerProfiler(tmp_path / "runs", wait=1, warmup=1, active=4)  # batches 2..5; batch 3 fails
    trainer = pl.Trainer(max_steps=6, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, profiler=profiler, default_root_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="bad batch"):
        trainer.fit(Failing(), data)
    assert not torch._C._autograd._profiler_enabled()  # the profiler does not outlive the failed fit
    [run_dir] = profiler.run_dirs
    with nx.open_run(run_dir) as run:
        assert any("RuntimeError: bad batch" in w for w in run.manifest["warnings"]), run.manifest["warnings"]
        assert run.sql("SELECT count(*) FROM events WHERE name = 'aten::addmm'").fetchone()[0] >= 1  # batch 2 is in it
