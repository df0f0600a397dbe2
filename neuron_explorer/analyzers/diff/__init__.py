"""Compare two runs: did the step get slower, what changed (operator, kernel, module, source line),
and is it real or noise. Definitions: docs/COMPARE.md. Reads runs only through open_run.

Only the steady state is compared (metrics.steady_steps, the one selection the summary's step
statistics and the step-outliers rule use too); every number is per profiler step. The modules,
each of which points only down the list:

- result.py: the Diff (the JSON of `diff --json`) and the thresholds (ALPHA, MIN_SHARE_OF_STEP, ...);
- match.py: source lines matched by file, function and code text; one file by two paths;
- collect.py: one side's figures per steady step (step times, lines as analyzers/lines.py defines them, modules, operators,
  kernels, calls); recordings in pairs;
- work.py: the work per step: operator calls, and that work priced at the base's time per call;
- verdict.py: the verdict as a decision table of docs/COMPARE.md's rules, each with its reason code;
- render.py: the reason, notes and text, from the codes and figures;
- compare.py: `compare`, the step time's test, the delta rows, and the decision;
- gate.py: `diff --fail-if-slower`.

Must not: select steps itself or print (render_text returns text).
"""

from __future__ import annotations

from .collect import recording_pairs, run_set, step_utilisation
from .compare import compare
from .gate import gate
from .match import match_files, source_file
from .render import TEST_NAMES, measure_name, reason_text, render_text, verdict_line, work_lines
from .result import (
           ALPHA,
           MIN_SHARE_OF_STEP,
           MIN_STEADY_STEPS,
           POWER,
           RUN_SET_TESTS,
           Delta,
           Diff,
           StepTime,
)
from .verdict import REASONS, RULES

__all__ = ["ALPHA", "MIN_SHARE_OF_STEP", "MIN_STEADY_STEPS", "POWER", "REASONS", "RULES", "RUN_SET_TESTS", "TEST_NAMES", "Delta",
           "Diff", "StepTime", "compare", "gate", "match_files", "measure_name", "reason_text", "recording_pairs", "render_text",
           "run_set", "source_file", "step_utilisation", "verdict_line", "work_lines"]
