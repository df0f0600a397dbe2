"""The `neuron-explorer` command line. Thin: parse options, call one package function, render.

Every error the user can act on (NeuronExplorerError) is printed as one line on stderr with exit
code 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .errors import NeuronExplorerError

app = typer.Typer(
    name="neuron-explorer",
    help="Profile PyTorch jobs from the Python line to the device kernel, store them as Parquet, find what holds them back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _progress_factory():
    """A rich progress bar on stderr for files large enough to make people wait."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    def factory(label: str, size: int):
        if size < 16 << 20 or not sys.stderr.isatty():
            return None
        progress = Progress(TextColumn("[bold]importing[/] {task.description}"), BarColumn(), DownloadColumn(),
                            TimeRemainingColumn(), transient=True, console=_stderr_console())
        task = progress.add_task(label, total=size)
        progress.start()

        def update(done: int, total: int) -> None:
            progress.update(task, completed=min(done, size), total=max(total, size))
            if done >= total:
                progress.stop()

        return update

    return factory


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


@app.command("import")
def import_cmd(
    trace: Path = typer.Argument(..., help="A Kineto trace (.json or .json.gz) or a directory of per-rank traces."),
    out: Path = typer.Option(..., "--out", "-o", help="Run directory to write."),
    force: bool = typer.Option(False, "--force", help="Replace an existing run at --out."),
) -> None:
    """Import torch.profiler (Kineto) JSON traces into a run directory of Parquet tables."""
    from .collectors.chrome_trace import import_traces
    from .info import render_info, run_info

    result = import_traces(trace, out, force=force, progress_factory=_progress_factory(), command=sys.argv)
    typer.echo(render_info(run_info(result.run_dir)))


@app.command()
def info(
    run: Path = typer.Argument(..., help="Run directory."),
    as_json: bool = typer.Option(False, "--json", help="Print the same summary as JSON."),
) -> None:
    """Summarise a run: ranks, devices, steps, event counts, data-quality warnings."""
    from .info import render_info, run_info

    data = run_info(run)
    typer.echo(json.dumps(data, indent=1) if as_json else render_info(data))


@app.command()
def export(
    run: Path = typer.Argument(..., help="Run directory."),
    chrome: Path = typer.Option(..., "--chrome", help="Chrome/Perfetto trace to write (.json or .json.gz); a directory for several ranks."),
    rank: Optional[int] = typer.Option(None, "--rank", help="Export only this rank."),
) -> None:
    """Write a run back out as a Chrome / Perfetto trace (opens in ui.perfetto.dev or chrome://tracing)."""
    from .export import export_chrome

    for p in export_chrome(run, chrome, rank=rank):
        typer.echo(f"wrote {p}")


@app.command()
def schema(
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Print every table and column of the run format with type, unit and meaning."""
    from . import schema as s

    if as_json:
        typer.echo(json.dumps({t.name: [c.__dict__ for c in t.columns] for t in s.RANK_TABLES}, indent=1))
    else:
        typer.echo(s.markdown())


@app.command()
def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", "-o", help="Where to write the demo run."),
) -> None:
    """Import the built-in sample trace (a small CPU training loop) and summarise it."""
    from .collectors.chrome_trace import import_traces
    from .info import render_info, run_info

    sample = _sample_trace()
    result = import_traces(sample, out, force=True, command=sys.argv)
    typer.echo(render_info(run_info(result.run_dir)))
    typer.echo("")
    typer.echo("next:")
    typer.echo(f"  neuron-explorer info {result.run_dir} --json")
    typer.echo(f"  duckdb -c \"SELECT kind, count(*) FROM '{result.run_dir}/rank=*/events.parquet' GROUP BY 1\"")


def _sample_trace() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "sample_traces" / "cpu_train_step.json.gz", here.parent / "sample_traces" / "cpu_train_step.json.gz"):
        if candidate.is_file():
            return candidate
    raise NeuronExplorerError("the built-in sample trace is missing from this installation (sample_traces/cpu_train_step.json.gz)")


@app.command()
def version() -> None:
    """Print the Neuron Explorer version and the run format version."""
    from . import __version__, schema as s

    typer.echo(f"neuron-explorer {__version__} (run format v{s.FORMAT_VERSION})")


def main() -> None:
    try:
        app()
    except NeuronExplorerError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
