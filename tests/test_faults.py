"""Faults while writing a run (issue 13, item 8): a failed final rename, a full disk, a writer killed
half-way, and --force aimed at something that is not a run. Each is one line, and no run is lost."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from neuron_explorer import store
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.errors import InputError

from .conftest import REPO, TRACES, cli
from .test_sandbox import run_digest

SMALL = TRACES / "cuda_simple_add.json.gz"
OTHER = TRACES / "cuda_triton.json.gz"


def leftovers(folder: Path, name: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(f".{name}."))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return import_traces(SMALL, tmp_path / "run").run_dir


# --- the final rename ---------------------------------------------------------------------

def test_a_failed_final_rename_puts_the_old_run_back(run: Path, monkeypatch):
    before = run_digest(run)
    real_replace = os.replace

    def replace(src, dst):
        if ".tmp-" in Path(src).name and Path(dst) == run:  # the new run onto its final place
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_replace(src, dst)

    monkeypatch.setattr(store.os, "replace", replace)
    with pytest.raises(InputError) as err:
        import_traces(OTHER, run, force=True)
    monkeypatch.undo()
    message = str(err.value)
    assert "\n" not in message and "cannot move the new run into place" in message and "old run is unchanged" in message
    assert run_digest(run) == before  # the old run, in place, as it was
    assert leftovers(run.parent, "run") == []  # no .run.old-* and no .run.tmp-* stranded
    info = cli("info", run, "--json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["ranks"]


def test_moving_the_old_run_aside_failing_leaves_it_too(run: Path, monkeypatch):
    before = run_digest(run)
    real_replace = os.replace

    def replace(src, dst):
        if Path(src) == run:
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real_replace(src, dst)

    monkeypatch.setattr(store.os, "replace", replace)
    with pytest.raises(InputError, match="cannot move the old run aside"):
        import_traces(OTHER, run, force=True)
    monkeypatch.undo()
    assert run_digest(run) == before and leftovers(run.parent, "run") == []


# --- a full disk --------------------------------------------------------------------------

def test_a_full_disk_is_one_line_and_the_old_run_stays(run: Path, monkeypatch):
    before = run_digest(run)

    def full(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    monkeypatch.setattr(pq.ParquetWriter, "write_batch", full)
    with pytest.raises(InputError) as err:
        import_traces(OTHER, run, force=True)
    monkeypatch.undo()
    assert "no space left on device" in str(err.value) and "\n" not in str(err.value)
    assert run_digest(run) == before and leftovers(run.parent, "run") == []


def test_a_full_disk_from_the_cli_is_one_line_exit_2(tmp_path: Path):
    # The CLI in a child process whose Parquet writes fail as on a full disk (pyarrow's own OSError).
    code = textwrap.dedent(f"""
        import errno, sys
        import pyarrow.parquet as pq
        def full(*a, **kw):
            raise OSError(errno.ENOSPC, "No space left on device")
        pq.write_table = full
        pq.ParquetWriter.write_batch = full
        sys.argv = ["neuron-explorer", "import", {str(SMALL)!r}, "-o", {str(tmp_path / "run")!r}]
        from neuron_explorer.cli import main
        main()
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("error: ") and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "no space left on device" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "run").exists() and leftovers(tmp_path, "run") == []


# --- a writer killed half-way -------------------------------------------------------------

KILLED_WRITER = """
import sys, time
from neuron_explorer import store
def stuck(dir_, tables, *options):
    print("writing", flush=True)
    time.sleep(600)
store._write_partition = stuck
from neuron_explorer.collectors.chrome_trace import import_traces
import_traces(sys.argv[1], sys.argv[2], force=True)
"""


def start_stuck_writer(trace: Path, out: Path) -> subprocess.Popen:
    """A writer stopped inside its temporary directory (it prints 'writing' once there)."""
    p = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(trace), str(out)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert p.stdout.readline().strip() == "writing"
    return p


def test_stale_temporary_directories_of_a_killed_writer_go_at_the_next_write(run: Path):
    before = run_digest(run)
    killed = start_stuck_writer(OTHER, run)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    stale = leftovers(run.parent, "run")
    assert len(stale) == 1 and ".tmp-" in stale[0]  # what a kill leaves
    assert run_digest(run) == before
    live = start_stuck_writer(OTHER, run)  # a concurrent writer that is still running
    try:
        fresh = set(leftovers(run.parent, "run")) - set(stale)
        assert len(fresh) == 1
        old_style = run.parent / ".run.tmp-0123abcd"  # an older name (no pid): stale by age only
        old_style.mkdir()
        os.utime(old_style, (time.time() - 2 * store.STALE_AFTER_S,) * 2)
        young_old_style = run.parent / ".run.tmp-4567cdef"
        young_old_style.mkdir()
        other_place = run.parent / ".runs2.tmp-0123abcd"  # another output's: not this write's business
        other_place.mkdir()
        os.utime(other_place, (time.time() - 2 * store.STALE_AFTER_S,) * 2)
        import_traces(OTHER, run, force=True)
        left = set(leftovers(run.parent, "run"))
        assert stale[0] not in left and old_style.name not in left  # the killed writer's and the day-old one
        assert fresh <= left and young_old_style.name in left  # the live writer's and the young one stay
        assert other_place.exists()
    finally:
        live.kill()
        live.wait(timeout=60)
    assert run_digest(run) != before and cli("info", run).returncode == 0


# --- --force aimed at something that is not a run ----------------------------------------

def test_force_refuses_a_directory_that_is_not_a_run(tmp_path: Path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"meow")
    p = cli("import", SMALL, "-o", folder, "--force")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "not a run" in p.stderr, p.stderr
    assert (folder / "cat.jpg").read_bytes() == b"meow" and sorted(os.listdir(folder)) == ["cat.jpg"]


def test_force_refuses_the_directory_that_holds_the_input_traces(tmp_path: Path):
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "rank-0.json.gz").write_bytes(SMALL.read_bytes())
    p = cli("import", traces, "-o", traces, "--force")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert (traces / "rank-0.json.gz").read_bytes() == SMALL.read_bytes()
    # a run that holds the trace being imported into it is not replaced either
    run = import_traces(SMALL, tmp_path / "run").run_dir
    inside = run / "kept.json.gz"
    inside.write_bytes(OTHER.read_bytes())
    before = run_digest(run)
    p = cli("import", inside, "-o", run, "--force")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "input of this import" in p.stderr, p.stderr
    assert run_digest(run) == before and leftovers(tmp_path, "run") == []


def test_force_still_replaces_a_run_and_an_empty_directory(tmp_path: Path, run: Path):
    assert cli("import", OTHER, "-o", run, "--force").returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("import", SMALL, "-o", empty).returncode == 0 and store.is_run(empty)


@pytest.mark.parametrize("target", ["/proc/x", "/dev/null"])
def test_an_output_that_cannot_be_written_is_one_line_before_any_work(target: str):
    p = cli("import", SMALL, "-o", target)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr
