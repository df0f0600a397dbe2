"""The finding contract (docs/METRICS.md "Findings"; its JSON Schema: docs/report.schema.json): what every rule yields and every output renders.

Plain dataclasses with a stable JSON form (`to_dict`). Keys are only ever added, never renamed,
so agents and CI can rely on them; `REPORT_SCHEMA_VERSION` is bumped when one is added.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

REPORT_SCHEMA_VERSION = 2
"""2: findings gained `contents` (what is inside them, analyzers/contents.py, with advice)."""

SEVERITIES = ("high", "medium", "low", "info")
"""Ordered from most to least severe."""

CATEGORIES = (
    "device_idle",
    "launch_overhead",
    "synchronization",
    "copies",
    "input_pipeline",
    "communication",
    "hotspot",
    "python_overhead",
    "step_variance",
    "memory",
    "precision",
    "compilation",
)


@dataclass
class Location:
    """Where a finding is. Every field is optional: the data does not always have it."""

    rank: int | None = None
    device: int | None = None
    steps: list[int] = field(default_factory=list)
    op: str | None = None
    kernel: str | None = None
    source: str | None = None  # "file.py:42", the user's line
    module_path: str | None = None


@dataclass
class Evidence:
    """How to re-check a finding: a query anyone can run on the run with plain DuckDB.

    `sql` refers to the tables as views named events, frames, flows, memory, counters (what
    open_run and `neuron-explorer query` provide); `sample_event_ids` are a few events it is about.
    """

    sql: str
    sample_event_ids: list[int] = field(default_factory=list)
    values: dict = field(default_factory=dict)  # the numbers the text quotes, by name


@dataclass
class Finding:
    rule_id: str
    title: str
    category: str
    severity: str
    impact_ns: int  # time the problem costs over the analysed window (all steps, this rank)
    impact_share: float  # impact_ns / (total step time, or span when there are no steps), 0..1
    saving_bound_ns: int  # an upper bound on what fixing it could save
    location: Location
    evidence: Evidence
    recommendation: str
    confidence: float  # 0..1; drops with data-quality problems (no stacks, dropped events, one step)
    confidence_notes: list[str] = field(default_factory=list)
    # what is inside the finding (analyzers/contents.py, docs/METRICS.md): {"roots": {"what", "count",
    # "total_ns", "groups"}, "children": [{"kind", "name", "shapes", "dtypes", "count", "total_ns"}],
    # "sql", "advice": [sentences, analyzers/advice.py]}; {} when it names nothing to look inside
    contents: dict = field(default_factory=dict)

    @property
    def source(self) -> str | None:
        return self.location.source

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Report:
    run: str
    summary: dict  # per rank: the summary numbers (see docs/METRICS.md)
    findings: list[Finding]
    not_applicable: list[dict] = field(default_factory=list)  # {"rule_id", "reason"}
    warnings: list[str] = field(default_factory=list)  # data quality and rules that failed
    schema_version: int = REPORT_SCHEMA_VERSION
    # per rank, its rows of analysis/critical_path.parquet and work.parquet, taken while its analysis
    # held them (outputs.rank_parts), so that writing them computes nothing again; not in report.json
    rank_parts: dict = field(default_factory=dict, repr=False, compare=False)
    # why RUN/analysis/ could not be written (one line: a read-only place, a full disk), None when it was
    # or when writing was not asked for; not in report.json
    not_saved: str | None = field(default=None, repr=False, compare=False)

    def content(self) -> dict:
        """What report.json holds, the findings as their dataclasses (`to_dict`: as dicts)."""
        return {
            "schema_version": self.schema_version,
            "run": self.run,
            "summary": self.summary,
            "findings": self.findings,
            "not_applicable": self.not_applicable,
            "warnings": self.warnings,
        }

    def to_dict(self) -> dict:
        return {**self.content(), "findings": [f.to_dict() for f in self.findings]}

