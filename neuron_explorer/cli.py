"""The `neuron-explorer` command line. Thin: parse options, call one package function, render.

Every error the user can act on (NeuronExplorerError) is printed as one line on stderr with exit
code 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup

from .errors import NeuronExplorerError


class _Group(TyperGroup):
    """Plain-text help (click's formatter), with the commands listed under their panels (Record,
    Analyse, Explore) as typer's rich help lists them. Rich help costs `--help` 0.15-0.3 s of imports
    (rich, markdown-it, pygments) before it prints anything (issue 37: start-up <= 0.5 s)."""

    def format_commands(self, ctx, formatter) -> None:
        panels: dict[str, list] = {}
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                panels.setdefault(getattr(cmd, "rich_help_panel", None) or "Commands", []).append((name, cmd))
        if not panels:
            return
        limit = formatter.width - 6 - max(len(n) for cmds in panels.values() for n, _ in cmds)
        for panel, cmds in panels.items():
            with formatter.section(panel):
                formatter.write_dl([(n, c.get_short_help_str(limit)) for n, c in cmds])


app = typer.Typer(
    name="neuron-explorer",
    help="Profile PyTorch jobs from the Python line to the device kernel, store them as Parquet, find what holds them back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=_Group,
    context_settings={"max_content_width": 120},
)


_RAY_EXTRA = '\n\n\b\nNeeds pip install "neuron-explorer[ray]".'
"""The end of a help text: its own paragraph, which click prints unwrapped (`\\b`), so that the command
is never cut at its hyphen (plain text, no rich markup: `[ray]` prints as written)."""


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


class _ImportProgress:
    """Rich progress on stderr for `import`: files and bytes done over all traces, and a bar of
    its own for each large file decoded in this process. Started on first use; one live display."""

    LARGE_FILE = 16 << 20

    def __init__(self) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("[bold]importing[/] {task.description}"), BarColumn(), DownloadColumn(),
                                 TimeRemainingColumn(), transient=sys.stderr.isatty(), console=_stderr_console())
        self.task = None
        self.started = False

    def _start(self) -> None:
        if not self.started:
            self.progress.start()
            self.started = True

    def files(self, done: int, total: int, done_bytes: int, total_bytes: int) -> None:
        self._start()
        label = f"{done}/{total} files"
        if self.task is None:
            self.task = self.progress.add_task(label, total=total_bytes)
        self.progress.update(self.task, description=label, completed=done_bytes)

    def file_factory(self, label: str, size: int):
        if size < self.LARGE_FILE:
            return None
        self._start()
        task = self.progress.add_task(label, total=size)

        def update(done: int, total: int) -> None:
            self.progress.update(task, completed=min(done, size), total=max(total, size))
            if done >= total:
                self.progress.remove_task(task)

        return update

    def stop(self) -> None:
        if self.started:
            self.progress.stop()


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


@app.command("import", rich_help_panel="Record")
def import_cmd(
    # str, not Path (an unreadable trace is the importer's one-line error, and Path would fold the // of an s3:// URI)
    trace: str = typer.Argument(..., metavar="TRACE", help="A Kineto trace (.json or .json.gz), a directory of per-rank traces, or the same "
                                "in an object store (s3://bucket/key.json.gz, s3://bucket/prefix/)."),
    out: str = typer.Option(..., "--out", "-o", metavar="PATH", help="Run directory to write (on a filesystem, not s3://)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing run at --out."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Worker processes for a directory of traces "
                                          "(default: one per core, fewer when memory is short)."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Show files and bytes done on stderr "
                                            "(default: when stderr is a terminal)."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Import each trace as a task on this Ray cluster (an address, auto: "
                                      "the one `ray start` runs, local: a new one here); --out on a shared filesystem."
                                      f"{_RAY_EXTRA}"),
    capture: Optional[list[Path]] = typer.Option(None, "--capture", metavar="PATH", help="A trace of the graph captures (CUDA/HIP "
                                                 "graphs) that TRACE replays, or a folder of them; repeatable. A capture_traces/ folder "
                                                 "beside the trace is read too. Replayed kernels take the operator and statement they had "
                                                 "at capture (docs/METRICS.md, Graph replays)."),
    kernel_provenance: Optional[list[Path]] = typer.Option(None, "--provenance", metavar="PATH", help="Inductor's provenance of "
                                                           "the trace's torch.compile kernels: the TORCH_TRACE folder (or its "
                                                           "dedicated_log_torch_trace_*.log) of a run with torch._inductor.config."
                                                           "trace.provenance_tracking_level = 1, or a JSON file of {kernel: [stack "
                                                           "traces]}; repeatable. Each kernel's time goes to the statements it was "
                                                           "generated from (README, Importing torch.compile traces). The one "
                                                           "such log beside the trace is read when none is given."),
    keep_device_clock: bool = typer.Option(False, "--keep-device-clock", help="Keep device times as the trace has them. By "
                                           "default a device whose first work starts 1 ms or more after its launch, and none of "
                                           "whose launched work starts sooner, has its clock moved to its launches (ROCm traces "
                                           "run milliseconds behind the host's; docs/METRICS.md), and the import says so."),
) -> None:
    """Import torch.profiler (Kineto) JSON traces into a run directory of Parquet tables."""
    from .collectors.chrome_trace import import_traces
    from .info import render_info, run_info

    bar = _ImportProgress() if (sys.stderr.isatty() if progress is None else progress) else None
    try:
        result = import_traces(trace, out, force=force, tune_allocator=True, command=sys.argv, workers=workers, ray=ray,
                               captures=capture, kernel_provenance=kernel_provenance, keep_device_clock=keep_device_clock,
                               progress_factory=bar.file_factory if bar else None, progress=bar.files if bar else None)
    finally:
        if bar:
            bar.stop()
    typer.echo(render_info(run_info(result.run_dir)))


@app.command(rich_help_panel="Analyse")
def info(
    run: Path = typer.Argument(..., help="Run directory, or a Kineto trace (or directory of traces) to import on the fly."),
    as_json: bool = typer.Option(False, "--json", help="Print the same summary as JSON."),
) -> None:
    """Summarise a run: ranks, devices, steps, event counts, data-quality warnings."""
    from .info import render_info, run_info

    data = run_info(run)
    typer.echo(json.dumps(data, indent=1) if as_json else render_info(data))


@app.command(rich_help_panel="Explore")
def export(
    run: Path = typer.Argument(..., help="Run directory, or a Kineto trace (or directory of traces) to import on the fly."),
    chrome: Path = typer.Option(..., "--chrome", help="Chrome/Perfetto trace to write (.json or .json.gz); a directory for several ranks."),
    rank: Optional[int] = typer.Option(None, "--rank", help="Export only this rank."),
) -> None:
    """Write a run back out as a Chrome / Perfetto trace (opens in ui.perfetto.dev or chrome://tracing)."""
    from .export import export_chrome

    for p in export_chrome(run, chrome, rank=rank):
        typer.echo(f"wrote {p}")


@app.command(rich_help_panel="Explore")
def schema(
    run: Optional[Path] = typer.Argument(None, help="A run directory: list the views you can query on it (its schema_fields)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Print every table and column of the run format with type, unit and meaning."""
    from . import schema as s

    if run is not None:
        from .agent.catalog import describe, render_text

        tables = describe(run)
        typer.echo(json.dumps({"tables": tables}, indent=1) if as_json else render_text(tables), nl=as_json)
    elif as_json:
        typer.echo(json.dumps({t.name: [c.__dict__ for c in t.columns] for t in s.RANK_TABLES}, indent=1))
    else:
        typer.echo(s.markdown())


@app.command(rich_help_panel="Explore")
def query(
    run: Path = typer.Argument(..., help="Run directory, or a Kineto trace (or directory of traces) to import on the fly."),
    sql: str = typer.Argument(..., help="One SELECT statement (DuckDB SQL) over the views events, frames, flows, ... (see `schema RUN`)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json (the {ok, error, columns, rows, truncated, row_count} envelope) or csv."),
    max_rows: int = typer.Option(1000, "--max-rows", min=0, help="Return at most this many rows (the output says when it cut)."),
    timeout: float = typer.Option(10.0, "--timeout", help="Stop the query after this many seconds (more than 0, at most 3600)."),
    memory_limit: int = typer.Option(2048, "--memory-limit", metavar="MB", help="The sandbox process's whole memory in MB (256 or more): "
                                     "a query that needs more stops with one line."),
) -> None:
    """Run one read-only SELECT on a run in the sandbox (no writes, no files outside the run, a time and a memory limit)."""
    from .agent.render import FORMATS, render
    from .agent.sandbox import query as sandbox_query

    if fmt not in FORMATS:
        _fail(f"--format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    result = sandbox_query(run, sql, max_rows=max_rows, timeout_s=timeout, memory_limit_mb=memory_limit)
    if fmt == "json":
        typer.echo(render(result, fmt), nl=False)
    if not result.ok:
        _fail(f"{run}: {result.error}")
    if fmt != "json":
        typer.echo(render(result, fmt), nl=False)
        if result.truncated and fmt == "csv":
            typer.echo(f"note: output truncated at {result.row_count} rows (--max-rows)", err=True)


def _each_run(paths: list[Path]) -> list[Path]:
    """Paths with each folder of runs (`runs/`, what `record --runs N` or an integration writes)
    replaced by the runs in it: the commands that serve several runs serve them all."""
    from .store import runs_in

    return [r for p in paths for r in (runs_in(p) or [p])]


@app.command(rich_help_panel="Explore")
def mcp(
    runs: list[Path] = typer.Argument(..., help="Run directories the agent may read (a folder of runs: each of them)."),
    memory_limit: int = typer.Option(2048, "--memory-limit", metavar="MB", help="Each run's SQL sandbox process's whole memory in MB "
                                     "(256 or more): a query that needs more stops with one line."),
) -> None:
    """Serve runs to an LLM agent over MCP (stdio): tools list_runs, summary, findings, query, ... (see README "For agents")."""
    from .agent.mcp_server import serve

    serve(_each_run(runs), memory_limit_mb=memory_limit)


@app.command(rich_help_panel="Explore")
def dashboard(
    runs: list[Path] = typer.Argument(..., help="Run directories to serve (only these are served; a folder of runs: each of them)."),
    port: int = typer.Option(8050, "--port", min=1, max=65535, help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; the default serves this machine only."),
) -> None:
    """Serve the web dashboard: timeline, event chain and source, findings, tables (and /api/<view> JSON)."""
    from .dashboard import serve as serve_dashboard

    serve_dashboard(_each_run(runs), host=host, port=port, echo=typer.echo)


@app.command(rich_help_panel="Record")
def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", "-o", help="Where to write the demo run (replaced if it exists)."),
) -> None:
    """Record a small built-in CPU training loop with the live collector, analyse it and print the report."""
    from .analyzers.engine import analyze as run_analyze
    from .analyzers.render import text
    from .demo import train_demo

    typer.echo(f"recording a small training loop into {out} ...", err=True)
    run_dir = train_demo(out)
    typer.echo(text(run_analyze(run_dir)), nl=False)
    typer.echo("")
    typer.echo("next:")
    typer.echo(f"  neuron-explorer dashboard {run_dir}        # timeline, findings and source in the browser")
    typer.echo(f"  neuron-explorer analyze {run_dir} --json   # the same report for agents and CI")
    typer.echo(f"  neuron-explorer query {run_dir} "
               "\"SELECT name, sum(dur_ns) FROM events WHERE kind = 'cpu_op' GROUP BY 1 ORDER BY 2 DESC LIMIT 10\"")
    typer.echo(f"  neuron-explorer info {run_dir}")


def _sample_trace() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "sample_traces" / "cpu_train_step.json.gz", here.parent / "sample_traces" / "cpu_train_step.json.gz"):
        if candidate.is_file():
            return candidate
    raise NeuronExplorerError("the built-in sample trace is missing from this installation (sample_traces/cpu_train_step.json.gz)")


@app.command(rich_help_panel="Analyse")
def analyze(
    run: Path = typer.Argument(..., help="Run directory, or a Kineto trace (or directory of traces) to import on the fly."),
    as_json: bool = typer.Option(False, "--json", help="Print report.json instead of text."),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print the report as Markdown."),
    fail_on: Optional[str] = typer.Option(None, "--fail-on", help="Exit 1 when a finding of this severity or worse exists: high, medium or low."),
    peak_tflops: Optional[float] = typer.Option(None, "--peak-tflops", help="The device's peak dense TFLOP/s, for MFU and the roofline "
                                                "(replaces the built-in figure; see --peak-dtype)."),
    peak_gbps: Optional[float] = typer.Option(None, "--peak-gbps", help="The device's peak memory bandwidth in GB/s, for the roofline."),
    peak_dtype: Optional[str] = typer.Option(None, "--peak-dtype", help="The dtype --peak-tflops is for: fp32, tf32, bf16, fp16, fp8 "
                                             "(default: every dtype)."),
    peaks_file: Optional[Path] = typer.Option(None, "--peaks", help="A JSON list of device peaks matched before the built-in table "
                                              "(docs/METRICS.md, Utilisation)."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Analyse each rank as a task on this Ray cluster (an address, auto, "
                                      f"or local); the run on a shared filesystem.{_RAY_EXTRA}"),
    capture: Optional[list[Path]] = typer.Option(None, "--capture", metavar="PATH", help="A trace of the graph captures (CUDA/HIP "
                                                 "graphs) that the trace replays, or a folder of them; repeatable. A capture_traces/ folder "
                                                 "beside the trace is read too. Replayed kernels take the operator and statement they had "
                                                 "at capture (docs/METRICS.md, Graph replays)."),
) -> None:
    """Find what holds the job back: ranked findings with impact, source line, evidence SQL and advice."""
    from .analyzers.engine import analyze as run_analyze
    from .analyzers.model import SEVERITIES
    from .analyzers.outputs import report_json
    from .analyzers.render import markdown, text
    from .analyzers.utilisation import peaks_from_options

    if fail_on is not None and fail_on not in ("high", "medium", "low"):
        _fail(f"--fail-on must be high, medium or low, not {fail_on!r}")
    if ray is not None and (peak_tflops, peak_gbps, peak_dtype, peaks_file) != (None, None, None, None):
        _fail("--ray does not carry --peak-tflops, --peak-gbps, --peak-dtype or --peaks to the Ray workers yet; analyse without --ray")
    if capture:
        from .store import is_run

        if is_run(run):
            _fail("--capture is read when a trace is imported: give the trace, not a run")
        from .collectors.trace_cache import cached_run

        run = cached_run(run, capture)
    with peaks_from_options(tflops=peak_tflops, gbps=peak_gbps, dtype=peak_dtype, file=peaks_file):
        report = run_analyze(run, ray=ray)
    typer.echo(report_json(report) if as_json else markdown(report) if as_markdown else text(report), nl=False)
    if report.not_saved:  # the report above is whole; only its copy in RUN/analysis/ is missing
        typer.echo(f"note: {report.not_saved}; the report above is complete", err=True)
    if fail_on is not None:
        worst = SEVERITIES.index(fail_on)
        if any(SEVERITIES.index(f.severity) <= worst for f in report.findings):
            raise typer.Exit(1)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}, rich_help_panel="Record")
def record(
    ctx: typer.Context,
    script: Optional[str] = typer.Argument(None, help="The script to run (its own arguments follow it)."),
    out: Path = typer.Option(..., "--out", "-o", help="Run directory to write."),
    module: Optional[str] = typer.Option(None, "-m", "--module", help="Run a module, as python -m does (its arguments follow it)."),
    wait: int = typer.Option(0, "--wait", help="Schedule: steps to skip at the start of each cycle (needs --active)."),
    warmup: int = typer.Option(0, "--warmup", help="Schedule: warm-up steps of each cycle (needs --active)."),
    active: int = typer.Option(0, "--active", help="Schedule: steps recorded per cycle; 0 records the whole script as one window."),
    repeat: int = typer.Option(0, "--repeat", help="Schedule: number of cycles (0: until the script ends)."),
    activities: Optional[str] = typer.Option(None, "--activities",
                                             help="Comma-separated: cpu,cuda,xpu,mtia,privateuse1 (default: CPU and every accelerator available)."),
    no_stack: bool = typer.Option(False, "--no-stack", help="Do not record Python calls (no source lines)."),
    no_statement_lines: bool = typer.Option(False, "--no-statement-lines",
                                            help="Do not link operators written as Python syntax (a @ b, x[i]) to their own "
                                                 "statement; they then link to the line that called the enclosing function."),
    no_memory: bool = typer.Option(False, "--no-memory", help="Do not record allocations."),
    no_shapes: bool = typer.Option(False, "--no-shapes", help="Do not record input shapes."),
    force: bool = typer.Option(False, "--force", help="Replace an existing run at --out."),
    runs: int = typer.Option(1, "--runs", min=1, help="Record the script this many times, one process after another, into "
                             "OUT/1 .. OUT/N: a run set, which `diff` compares by the variation between recordings (for CI gates)."),
) -> None:
    """Run a script (or -m module) under the live collector; keeps its exit code.

    Each optimizer.step() ends a profiler step. Arguments after the script go to the script.
    """
    from .collectors.record import profile_options
    from .collectors.record import record as run_record

    args = list(ctx.args)
    if module and script is not None:  # with -m, the first positional is the module's own argument
        args.insert(0, script)
        script = None
    options = profile_options(wait=wait, warmup=warmup, active=active, repeat=repeat, activities=activities,
                              stack=not no_stack, memory=not no_memory, shapes=not no_shapes,
                              statement_lines=not no_statement_lines)
    targets = [out] if runs == 1 else [out / str(i) for i in range(1, runs + 1)]
    for target in targets:
        result = run_record(target, script, args, module=module, overwrite=force, profile_options=options)
        if result.run_dir is not None:
            typer.echo(f"neuron-explorer: wrote {result.run_dir}", err=True)
        if result.exit_code:
            break
    raise typer.Exit(result.exit_code)


@app.command(rich_help_panel="Analyse")
def diff(
    base: Path = typer.Argument(..., help="The reference run, or a folder of several recordings of it (record --runs N)."),
    test: Path = typer.Argument(..., help="The run to compare with it, or a folder of several recordings."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    top: int = typer.Option(20, "--top", help="How many deltas the text shows."),
    fail_if_slower: Optional[str] = typer.Option(None, "--fail-if-slower", metavar="PCT",
                                                 help="Exit 1 when the steady-state step time is significantly slower by more than PCT (e.g. 5%)."),
) -> None:
    """Compare two runs over their steady-state steps: step time (medians, rank test, verdict), then what changed per source \
line, nn.Module, operator and kernel."""
    from .analyzers.diff import compare, gate, render_text

    threshold = None
    if fail_if_slower is not None:
        try:
            threshold = float(fail_if_slower.strip().rstrip("%"))
        except ValueError:
            _fail(f"--fail-if-slower takes a percentage such as 5%, not {fail_if_slower!r}")
    result = compare(base, test, detect_pct=threshold)
    typer.echo(json.dumps(result.to_dict(), indent=1) if as_json else render_text(result, top=top))
    if threshold is not None:
        failed, message = gate(result, threshold)
        if message:
            typer.echo(message, err=True)
        if failed:
            raise typer.Exit(1)


@app.command(rich_help_panel="Explore")
def version() -> None:
    """Print the Neuron Explorer version and the run format version."""
    from . import __version__
    from . import schema as s

    typer.echo(f"neuron-explorer {__version__} (run format v{s.FORMAT_VERSION})")


_RUNS_USER_CODE = frozenset({"record", "demo"})
"""Commands that run a workload in this process or its children: numpy's BLAS there stays theirs, and
so does Ctrl-C (record's own handling; `main` adds none)."""


def _tune_tool_process(argv: list[str]) -> None:
    """For the commands that run no user code: numpy's OpenBLAS on one thread (set before numpy is
    imported; a value the user set is kept), and no transparent huge pages (_malloc.no_huge_pages).
    On import, OpenBLAS starts a thread per core that spins for about 0.1 s waiting for work this
    tool never gives it: CPU taken from an import or an analysis on a small machine (`python -c
    'import numpy'` 0.18 -> 0.08 s of user CPU on two cores). numpy's large arrays on huge pages
    are zeroed 2 MiB at a time at each first touch: the analysis of a 1.23M-event rank spent
    3.8-4.3 s in the kernel, against 1.5-1.8 s on small pages (7.8-8.6 s -> 5.5-6.0 s in all)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in _RUNS_USER_CODE:
        if "numpy" not in sys.modules:
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        from .collectors._malloc import no_huge_pages

        no_huge_pages()


def main() -> None:
    from .errors import unreadable_file

    _tune_tool_process(sys.argv[1:])
    import signal

    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    # (not where Ctrl-C is ignored; not where a script runs in this process: its traceback is its own)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler and command not in _RUNS_USER_CODE:
        signal.signal(signal.SIGINT, _on_ctrl_c)
    try:
        app()
    except SystemExit as e:
        # the command ended as if nothing had come (a query swallowed the interrupt), or typer ended it at
        # KeyboardInterrupt with 130 and nothing said: one line, as everywhere else
        if _CTRL_C and e.code in (None, 0, 130):
            _interrupted()
        raise
    except NeuronExplorerError as e:
        if _CTRL_C:
            _interrupted()
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except Exception as e:  # a damaged run file is bad input too; anything else is a bug and keeps its traceback
        if _CTRL_C or _query_interrupted(e):  # Ctrl-C landed inside a DuckDB query, which stops it and raises
            _interrupted()
        problem = unreadable_file(e)
        if problem is None:
            raise
        typer.echo(f"error: {problem}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        _interrupted()


_CTRL_C = False
"""Whether Ctrl-C (SIGINT) came while a command ran (`_on_ctrl_c`)."""


def _on_ctrl_c(signum, frame) -> None:
    """Python's own Ctrl-C (KeyboardInterrupt), remembered: DuckDB turns one that lands in a query into
    an error of its own, which a rule's guard may report as the rule's failure while the command goes
    on. `main` then ends the command as interrupted, not with exit 0 or a traceback."""
    global _CTRL_C
    _CTRL_C = True
    raise KeyboardInterrupt


def _interrupted() -> None:
    typer.echo("interrupted", err=True)
    sys.exit(130)


def _query_interrupted(e: BaseException | None) -> bool:
    """Whether `e` is a DuckDB query stopped by Ctrl-C: DuckDB's InterruptException, the
    RuntimeError("Query interrupted") its relational API raises instead, or its error about an Arrow
    object whose scan a KeyboardInterrupt stopped (the held events); or has one as its cause."""
    seen = 0
    while e is not None and seen < 8:
        text = str(e).strip()
        if (isinstance(e, KeyboardInterrupt) or type(e).__name__ == "InterruptException"
                or (isinstance(e, RuntimeError) and text == "Query interrupted")
                or (type(e).__module__.startswith(("duckdb", "_duckdb")) and "KeyboardInterrupt" in text)):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


if __name__ == "__main__":
    main()
