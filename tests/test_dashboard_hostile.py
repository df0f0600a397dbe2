"""The dashboard under hostile requests (issue 13, item 10): values that do not fit are HTTP 400
with a one-line envelope, never a 500; a Dash asset path that climbs out is a 404; a source file
that is a symlink to something other than Python is not shown."""

from __future__ import annotations

import json

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import app as dash_app
from neuron_explorer.dashboard.runs import RunSet

from .conftest import X, write_trace
from .test_dashboard import BASE, EVENTS

BIG = str(1 << 63)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    folder = tmp / "traces"
    folder.mkdir()
    (folder / "evil.py").symlink_to("/etc/passwd")  # a "Python file" that is not one
    (folder / "good.py").write_text("def good():\n    return 1\n")
    (folder / "loop.py").symlink_to(folder / "loop.py")  # a link to itself
    outside = tmp / "outside.py"
    outside.write_text("print('hello')\n")
    (folder / "abs_evil.py").symlink_to("/etc/passwd")
    events = EVENTS + [
        X("evil.py(1): f", "python_function", 101, 2),
        X("good.py(1): good", "python_function", 104, 2),
        X("loop.py(1): loop", "python_function", 107, 2),
        X(f"{folder / 'abs_evil.py'}(1): g", "python_function", 110, 2),
    ]
    trace = write_trace(folder / "t.json", events, baseTimeNanoseconds=BASE)
    run_dir = import_traces(trace.resolve(), tmp / "run").run_dir  # by absolute path: its folder is a source root
    rs = RunSet([run_dir])
    yield rs, dash_app.create_app(rs).server.test_client()
    rs.close()


@pytest.fixture(scope="module")
def client(made):
    return made[1]


def get(client, url: str):
    r = client.get(url)
    body = json.loads(r.data) if r.mimetype == "application/json" else None
    return r.status_code, body


@pytest.mark.parametrize("url, says", [
    (f"/api/timeline?run=0&t0={BIG}", "t0 must be between"),
    ("/api/timeline?run=0&t1=1e23", "t1 must be between"),
    (f"/api/timeline?run=0&t0=-{BIG}&t1={(1 << 63) - 1}", "t0 must be between"),
    ("/api/timeline?run=0&t0=nan", "t0 must be an integer"),
    ("/api/timeline?run=0&t1=inf", "t1 must be an integer"),
    ("/api/timeline?run=0&width=1e30", "width must be between"),
    (f"/api/kernels?run=0&limit={BIG}", "limit must be between"),
    (f"/api/kernels?run=0&limit=-{int(BIG) + 1}", "limit must be between"),
    ("/api/kernels?run=0&limit=-5", "limit must be between"),
    ("/api/operators?run=0&limit=-5", "limit must be between"),
    ("/api/lines?run=0&limit=-1", "limit must be between"),
    ("/api/event?run=0&event_id=99999999999999999999", "event_id must be between"),
    ("/api/source?run=0&frame_id=-99999999999999999999", "frame_id must be between"),
    ("/api/source?run=0&frame_id=0&context=-3", "context must be between"),
    ("/api/memory?run=0&width=1e30", "width must be between"),
    ("/api/memory?run=0&width=-1", "width must be between"),
    (f"/api/timeline?run={BIG}", "no run"),
    (f"/api/kernels?run=0&rank={BIG}", "rank"),
])
def test_out_of_range_values_are_400_with_one_line(client, url, says):
    status, body = get(client, url)
    assert status == 400, (url, status, body)
    assert body["ok"] is False and says in body["error"] and "\n" not in body["error"], body


def test_extreme_values_on_every_parameter_never_give_500(client):
    values = ["", "0", "-1", "1e23", "-1e23", BIG, f"-{BIG}", str((1 << 63) - 1), "nan", "inf", "x", "1.5", "9" * 400]
    params = {"timeline": ["t0", "t1", "width", "rank"], "event": ["event_id"], "source": ["frame_id", "context"],
              "operators": ["limit", "rank"], "kernels": ["limit", "rank"], "lines": ["limit"], "steps": ["rank"],
              "memory": ["width", "rank"], "memory_range": ["t0", "t1", "width", "rank", "limit"], "findings": []}
    seen = set()
    for view, names in params.items():
        for name in names:
            for v in values:
                status, body = get(client, f"/api/{view}?run=0&{name}={v}")
                assert status in (200, 400), (view, name, v, status)
                assert body is not None and (status == 200) == body["ok"], (view, name, v, body)
                seen.add(status)
    assert seen == {200, 400}


@pytest.mark.parametrize("path", [
    "/_dash-component-suites/dash/..%2f..%2fetc%2fpasswd",
    "/_dash-component-suites/dash/..%2F..%2F..%2Fetc%2Fpasswd",
    "/_dash-component-suites/dash/deps/..%2f..%2f..%2f..%2fetc%2fhostname",
    "/_dash-component-suites/nope/x.js",
])
def test_dash_asset_paths_that_climb_out_are_not_served(client, path):
    r = client.get(path)
    assert r.status_code in (400, 404), (path, r.status_code)
    assert b"root:" not in r.data


def test_a_symlink_named_py_to_another_file_is_not_read(made, client):
    rs, _ = made
    frames = dict(rs.get(0).query("SELECT file, frame_id FROM frames")[1])
    evil = next(fid for f, fid in frames.items() if f.endswith("/evil.py") or f == "evil.py")
    status, body = get(client, f"/api/source?run=0&frame_id={evil}")
    assert status == 200 and body["ok"]
    assert body["data"]["readable"] is False and body["data"]["lines"] == []
    assert "root:" not in json.dumps(body)
    absolute = next(fid for f, fid in frames.items() if f.endswith("abs_evil.py"))
    status, body = get(client, f"/api/source?run=0&frame_id={absolute}")
    assert status == 200 and body["data"]["readable"] is False and "root:" not in json.dumps(body)
    loop = next(fid for f, fid in frames.items() if f.endswith("loop.py"))
    status, body = get(client, f"/api/source?run=0&frame_id={loop}")
    assert status == 200 and body["data"]["readable"] is False
    # a real .py file beside the trace is still shown: the check refuses only what it must
    good = next(fid for f, fid in frames.items() if f.endswith("good.py"))
    status, body = get(client, f"/api/source?run=0&frame_id={good}")
    assert status == 200 and body["data"]["readable"] is True
    assert any("def good" in line["text"] for line in body["data"]["lines"])


HOSTILE_VALUES = [None, {}, [], {"a": [1]}, [[1, 2]], "x", "", -1, 1 << 63, 1e308, -1e308, True, "🔥" * 50, 3.5, [None],
                  {"xaxis.range[0]": 1e308, "xaxis.range[1]": -1e308}, {"xaxis.range": [None, "a"]}, {"points": [{"x": "a"}]},
                  "0; DROP TABLE events", {"index": "1e9"}, 10**6]


def test_no_input_from_the_page_gives_a_500_on_any_callback(made, caplog):
    """Every server callback (issue 40, item 6), each of its inputs and states given each hostile value
    in turn — a tab that is a dict or a list, a finding index out of range or not a number, a relayout
    range of ±1e308 — and whole random combinations: never HTTP 500; a bad request body is a 400."""
    import random

    rs, _ = made
    app = dash_app.create_app(rs)
    client = app.server.test_client()
    client.get("/")
    rng = random.Random(40)
    tried, statuses = 0, {}
    server_callbacks = {k: cb for k, cb in app.callback_map.items() if cb.get("callback") is not None}
    assert len(server_callbacks) >= 10, sorted(server_callbacks)

    def post(key, cb, values):
        outputs = [o.rsplit(".", 1) for o in key.strip(".").split("...")] if key.startswith("..") else [key.rsplit(".", 1)]
        args = cb["inputs"] + cb.get("state", [])
        body = {"output": key, "outputs": [{"id": i, "property": p} for i, p in outputs] if len(outputs) > 1 else
                {"id": outputs[0][0], "property": outputs[0][1]},
                "inputs": [{**a, "value": v} for a, v in zip(cb["inputs"], values)],
                "state": [{**a, "value": v} for a, v in zip(cb.get("state", []), values[len(cb["inputs"]):])],
                "changedPropIds": [f"{a['id']}.{a['property']}" for a in cb["inputs"][:1]]}
        assert len(values) == len(args)
        return client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json").status_code

    for key, cb in server_callbacks.items():
        n = len(cb["inputs"]) + len(cb.get("state", []))
        for position in range(n):
            for bad in HOSTILE_VALUES:  # one hostile value, the others plausible (None: what the page sends at first)
                values = [None] * n
                values[position] = bad
                status = post(key, cb, values)
                tried += 1
                statuses.setdefault(status, []).append((key[:60], position, repr(bad)[:40]))
        for _ in range(30):  # all hostile at once
            status = post(key, cb, [rng.choice(HOSTILE_VALUES) for _ in range(n)])
            tried += 1
            statuses.setdefault(status, []).append((key[:60], "random"))
    for body in (b"not json", b"{}", json.dumps({"output": "nope.children", "inputs": []}).encode(), json.dumps({"output": "px.data"}).encode()):
        status = client.post("/_dash-update-component", data=body, content_type="application/json").status_code
        tried += 1
        statuses.setdefault(status, []).append(("body", body[:30]))
    assert 500 not in statuses, statuses[500][:5]
    assert set(statuses) <= {200, 204, 400}, {k: v[:3] for k, v in statuses.items()}
    print(f"callback inputs tried: {tried}")
    assert tried > 1000, tried  # the count the note reports
    assert "Traceback" not in caplog.text
