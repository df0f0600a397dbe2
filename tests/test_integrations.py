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
