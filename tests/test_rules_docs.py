"""Generated docs are current, and every rule carries what the docs and the engine need."""

from __future__ import annotations

import json

from neuron_explorer.analyzers import docs, report_schema
from neuron_explorer.analyzers.engine import all_rules
from neuron_explorer.analyzers.model import CATEGORIES

from .conftest import REPO


def test_rules_md_is_current():
    assert (REPO / "docs" / "RULES.md").read_text() == docs.markdown(), "run: python -m neuron_explorer.analyzers.docs > docs/RULES.md"


def test_report_schema_is_current():
    assert json.loads((REPO / "docs" / "report.schema.json").read_text()) == report_schema.SCHEMA, \
        "run: python -m neuron_explorer.analyzers.report_schema > docs/report.schema.json"


def test_every_rule_has_a_unique_id_category_thresholds_and_doc():
    rules = all_rules()
    ids = [r.RULE_ID for r in rules]
    assert len(ids) == len(set(ids)) and len(ids) >= 12
    for r in rules:
        assert r.CATEGORY in CATEGORIES and isinstance(r.THRESHOLDS, dict) and r.__doc__.startswith(r.RULE_ID + ":")
        assert r.RULE_ID in (REPO / "docs" / "RULES.md").read_text()


def test_every_summary_number_is_defined_in_metrics_md():
    text = (REPO / "docs" / "METRICS.md").read_text()
    for key in ("span_ns", "analysed_ns", "count", "mean_ns", "p50_ns", "p90_ns", "max_ns", "cv", "busy_ns", "window_ns", "idle_ns",
                "kernel_ns", "memcpy_ns", "memset_ns", "comm_ns", "comm_overlap_ns", "comm_exposed_ns", "comm_cpu_ns", "cpu_ns",
                "self_ns", "total_ns"):
        assert f"`{key}`" in text, key
