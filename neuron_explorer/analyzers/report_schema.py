"""The JSON Schema of report.json: `python -m neuron_explorer.analyzers.report_schema > docs/report.schema.json`.

Keys are only ever added (REPORT_SCHEMA_VERSION is bumped), never renamed. A test fails when
docs/report.schema.json differs from this output and validates real reports against it.
"""

from __future__ import annotations

import json

from .model import CATEGORIES, REPORT_SCHEMA_VERSION, SEVERITIES

_INT = {"type": "integer"}
_OPT_INT = {"type": ["integer", "null"]}
_OPT_STR = {"type": ["string", "null"]}
_GROUP = {"type": "object", "required": ["name", "shapes", "dtypes", "count", "total_ns"],
          "properties": {"name": {"type": "string"}, "shapes": {"type": "array"}, "dtypes": {"type": "array"},
                         "count": {"type": "integer", "minimum": 1}, "total_ns": {"type": "integer", "minimum": 0}}}
_NAMED = {"type": "object", "required": ["name", "count", "total_ns"],
          "properties": {k: _GROUP["properties"][k] for k in ("name", "count", "total_ns")}}
_STEPS = {"type": "object", "required": ["optimizer", "count", "total_ns"],
          "properties": {"optimizer": {"type": "string"}, **{k: _GROUP["properties"][k] for k in ("count", "total_ns")}}}
_CONTENTS = {"type": "object", "description": "what is inside the finding (docs/METRICS.md); {} when it names nothing to look inside",
             "properties": {
                 "roots": {"type": "object", "required": ["what", "count", "total_ns", "groups"],
                           "properties": {"what": {"type": "string"}, "count": _INT, "total_ns": _INT, "groups": {"type": "array", "items": _GROUP},
                                          "names": {"type": "array", "items": _NAMED}, "optimizer_steps": {"type": "array", "items": _STEPS},
                                          "captured": {"type": "object", "required": ["count", "total_ns"],
                                                       "properties": {"count": _INT, "total_ns": _INT}}}},
                 "children": {"type": "array", "items": {**_GROUP, "required": ["kind", *_GROUP["required"]],
                                                         "properties": {"kind": {"type": "string"}, **_GROUP["properties"]}}},
                 "sql": {"type": "string"}, "advice": {"type": "array", "items": {"type": "string"}}}}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://neuron-explorer/report.schema.json",
    "title": "Neuron Explorer analysis report",
    "type": "object",
    "required": ["schema_version", "run", "summary", "findings", "not_applicable", "warnings"],
    "properties": {
        "schema_version": {"const": REPORT_SCHEMA_VERSION},
        "run": {"type": "string"},
        "summary": {
            "type": "object", "required": ["ranks"],
            "properties": {"ranks": {"type": "array", "items": {
                "type": "object",
                "required": ["rank", "span_ns", "steps", "analysed_ns", "devices", "top_level_ops", "source_lines"],
                "properties": {
                    "rank": _INT, "span_ns": _INT, "analysed_ns": _INT, "comm_cpu_ns": _INT, "comm_cpu_exposed_ns": _OPT_INT, "compile_ns": _INT,
                    "steps": {"type": "object", "required": ["count", "total_ns", "mean_ns", "p50_ns", "p90_ns", "max_ns", "cv"]},
                    "devices": {"type": "array", "items": {"type": "object", "required": [
                        "device", "busy_ns", "window_ns", "idle_ns", "kernel_ns", "memcpy_ns", "memset_ns", "comm_ns", "comm_overlap_ns",
                        "comm_exposed_ns"]}},
                    "top_level_ops": {"type": "array"},
                    "source_lines": {"type": "object", "required": ["cpu", "device", "has_frames"]},
                }}}},
        },
        "findings": {"type": "array", "items": {
            "type": "object",
            "required": ["rule_id", "title", "category", "severity", "impact_ns", "impact_share", "saving_bound_ns", "location",
                         "evidence", "recommendation", "confidence", "confidence_notes", "contents"],
            "properties": {
                "rule_id": {"type": "string"}, "title": {"type": "string"},
                "category": {"enum": list(CATEGORIES)}, "severity": {"enum": list(SEVERITIES)},
                "impact_ns": {"type": "integer", "minimum": 0}, "impact_share": {"type": "number", "minimum": 0, "maximum": 1},
                "saving_bound_ns": {"type": "integer", "minimum": 0},
                "location": {"type": "object", "required": ["rank", "device", "steps", "op", "kernel", "source", "module_path"],
                             "properties": {"rank": _OPT_INT, "device": _OPT_INT, "steps": {"type": "array", "items": _INT},
                                            "op": _OPT_STR, "kernel": _OPT_STR, "source": _OPT_STR, "module_path": _OPT_STR}},
                "evidence": {"type": "object", "required": ["sql", "sample_event_ids", "values"],
                             "properties": {"sql": {"type": "string", "minLength": 1}, "sample_event_ids": {"type": "array", "items": _INT},
                                            "values": {"type": "object"}}},
                "recommendation": {"type": "string", "minLength": 1},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "confidence_notes": {"type": "array", "items": {"type": "string"}},
                "contents": _CONTENTS,
            }}},
        "not_applicable": {"type": "array", "items": {"type": "object", "required": ["rule_id", "reason"]}},
        "warnings": {"type": "array", "items": {"type": "string"}},
    },
}


def text() -> str:
    return json.dumps(SCHEMA, indent=1) + "\n"


if __name__ == "__main__":
    print(text(), end="")
