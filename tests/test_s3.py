"""Traces in S3: `import s3://bucket/prefix/` and `import s3://bucket/key.json.gz` write the same
run as the same files on disk, name the s3:// URIs as sources, keep what a failed import did for
the rerun, and say in one line what is wrong with a bucket, key or prefix.

pyarrow's own S3 client talks to moto's S3 server on a local port (AWS_ENDPOINT_URL), the way it
talks to AWS; nothing in Python is mocked. The traces are the hand-built 4 ranks of
test_many_ranks.py, rank 3 gzipped.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest

from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import cli
from .test_many_ranks import RANKS, _inodes, _tables, _write

pytestmark = pytest.mark.slow  # tier: starts a local S3 server (moto) and Ray

BUCKET = "nx-traces"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A local S3 server and the AWS environment that points pyarrow (and boto3) at it; yields a boto3 client."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # a free port
    server.start()
    port = server.get_host_and_port()[1]
    nowhere = tmp_path_factory.mktemp("no-aws-config") / "none"
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_EC2_METADATA_DISABLED": "true",
                     "AWS_CONFIG_FILE": str(nowhere), "AWS_SHARED_CREDENTIALS_FILE": str(nowhere)}.items():
            mp.setenv(k, v)
        mp.delenv("AWS_PROFILE", raising=False)
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client
    server.stop()


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The 4 rank traces on disk (rank 3 gzipped) and the run imported from them."""
    tmp = tmp_path_factory.mktemp("s3_local")
    traces = tmp / "traces"
    _write(traces, RANKS)
    plain = traces / "rank3.json"
    (traces / "rank3.json.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    return traces, import_traces(traces, tmp / "run").run_dir


def _upload(s3, traces: Path, prefix: str) -> list[str]:
    for p in sorted(traces.iterdir()):
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.name}", Body=p.read_bytes())
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/README.txt", Body=b"not a trace")
    return [f"s3://{BUCKET}/{prefix}/{p.name}" for p in sorted(traces.iterdir())]


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def _ranks_but_source(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "source"} for r in _manifest(run_dir)["ranks"]]


def _cli_tmp(tmp_path: Path) -> Path:
    """A TMPDIR of the CLI's own, to see that the local copies of the traces are deleted."""
    d = tmp_path / "tmpdir"
    d.mkdir()
    return d


def test_a_prefix_imports_the_same_run_as_the_files_on_disk(s3, local, tmp_path, monkeypatch):
    traces, local_run = local
    uris = _upload(s3, traces, "job42")
    monkeypatch.setenv("TMPDIR", str(_cli_tmp(tmp_path)))
    r = cli("import", f"s3://{BUCKET}/job42/", "-o", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    a, b = _tables(run), _tables(local_run)
    assert {k.split("/")[0] for k in a} == {f"rank={r}" for r in RANKS}
    assert sorted(a) == sorted(b) and all(a[k].equals(b[k]) for k in a)
    assert _ranks_but_source(run) == _ranks_but_source(local_run)
    got = _manifest(run)
    assert sorted(s["path"] for s in got["sources"]) == uris
    assert [r["source"] for r in got["ranks"]] == uris  # rank0.json ... rank3.json.gz, in rank order
    assert {s["path"]: s["bytes"] for s in got["sources"]} == {u: (traces / u.rsplit("/", 1)[1]).stat().st_size for u in uris}
    assert list((tmp_path / "tmpdir").iterdir()) == []  # each local copy deleted once imported


def test_one_key_imports_that_trace(s3, local, tmp_path):
    traces, local_run = local
    _upload(s3, traces, "one")
    r = cli("import", f"s3://{BUCKET}/one/rank3.json.gz", "-o", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    here = import_traces(traces / "rank3.json.gz", tmp_path / "here").run_dir
    a, b = _tables(tmp_path / "run"), _tables(here)
    assert sorted(a) == sorted(b) == [f"rank=3/{k}" for k in sorted(p.split("/")[1] for p in b)]
    assert all(a[k].equals(b[k]) for k in a)
    assert _manifest(tmp_path / "run")["sources"] == [{"path": f"s3://{BUCKET}/one/rank3.json.gz",
                                                       "bytes": (traces / "rank3.json.gz").stat().st_size, "rank": 3}]


def test_a_failing_trace_is_named_and_the_rerun_takes_the_kept_ranks(s3, local, tmp_path):
    traces, local_run = local
    _upload(s3, traces, "job43")
    good = (traces / "rank3.json.gz").read_bytes()
    s3.put_object(Bucket=BUCKET, Key="job43/rank3.json.gz", Body=good[: len(good) // 2])  # an upload cut short
    r = cli("import", f"s3://{BUCKET}/job43/", "-o", tmp_path / "run", "--workers", "2")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "1 of 4 traces failed (rank3.json.gz: " in r.stderr and "the 3 imported are kept" in r.stderr
    kept = tmp_path / ".run.kept"
    index = json.loads((kept / "kept.json").read_text())
    assert sorted(k.split("|")[0] for k in index) == [f"s3://{BUCKET}/job43/rank{i}.json" for i in range(3)]
    before = _inodes(kept)
    s3.put_object(Bucket=BUCKET, Key="job43/rank3.json.gz", Body=good)
    r = cli("import", f"s3://{BUCKET}/job43/", "-o", tmp_path / "run", "--workers", "2")
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    assert before <= _inodes(run) and not kept.exists()  # the kept ranks moved in, not imported again
    a, b = _tables(run), _tables(local_run)
    assert sorted(a) == sorted(b) and all(a[k].equals(b[k]) for k in a)


@pytest.mark.parametrize(("args", "problem"), [
    ([f"s3://{BUCKET}/job42/rank9.json"], f"s3://{BUCKET}/job42/rank9.json: no such object or prefix"),
    (["s3://nx-no-such-bucket/job42/"], "s3://nx-no-such-bucket/job42/: no such bucket (nx-no-such-bucket)"),
    ([f"s3://{BUCKET}/empty/"], f"s3://{BUCKET}/empty/: no .json or .json.gz traces under this prefix"),
    ([f"s3://{BUCKET}/job42/?access_key=AKIA&secret_key=shh"],
     f"s3://{BUCKET}/job42/: give the credentials in the environment (AWS_ACCESS_KEY_ID, ...), not in the URI: "
     "the run's manifest records it"),
])
def test_a_missing_key_bucket_or_trace_or_a_secret_in_the_uri_is_one_line(s3, local, tmp_path, args, problem):
    s3.put_object(Bucket=BUCKET, Key="empty/README.txt", Body=b"no traces here")
    _upload(s3, local[0], "job42")
    r = cli("import", *args, "-o", tmp_path / "run")
    assert (r.returncode, r.stderr) == (2, f"error: {problem}\n")
    assert not (tmp_path / "run").exists()


def test_a_run_is_not_written_to_s3(s3, local, tmp_path):
    _upload(s3, local[0], "job42")
    r = cli("import", f"s3://{BUCKET}/job42/", "-o", f"s3://{BUCKET}/runs/job42", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: s3://{BUCKET}/runs/job42: a run is written to a directory on a filesystem")
    assert list(tmp_path.iterdir()) == []  # no local s3:/ folder either
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/")


def test_a_gzip_bomb_in_s3_is_refused_by_its_plan_before_it_is_decoded(s3, tmp_path, monkeypatch):
    """Issue 41: the memory plan holds for a trace in S3 as for a local gzip: its JSON is counted by
    inflating the local copy (the trailer, here of a tiny last member, says 2 bytes), and a trace
    whose plan exceeds the memory available is refused in one line naming its URI, never decoded."""
    from neuron_explorer.collectors import chrome_trace
    from neuron_explorer.errors import InputError

    blanks = 40 << 20  # 40 MiB of JSON: plan 200 MiB + 3.5 x 40 MiB = 350 MiB, more than the 300 MiB said available
    body = gzip.compress(b'{"traceEvents": [' + b" " * blanks) + gzip.compress(b"]}")
    assert len(body) < 200_000 and int.from_bytes(body[-4:], "little") == 2
    s3.put_object(Bucket=BUCKET, Key="bomb/rank0.json.gz", Body=body)
    uri = f"s3://{BUCKET}/bomb/rank0.json.gz"
    monkeypatch.setattr(chrome_trace, "_available_memory", lambda: 300 << 20)

    def never(*a, **kw):
        raise AssertionError("decoded")

    monkeypatch.setattr(chrome_trace, "decode_rank", never)
    monkeypatch.setenv("TMPDIR", str(_cli_tmp(tmp_path)))
    monkeypatch.setattr("tempfile.tempdir", None)  # TMPDIR read again
    with pytest.raises(InputError) as e:
        import_traces(uri, tmp_path / "run")
    assert str(e.value).startswith(f"{uri}: importing it needs at least about "), str(e.value)
    assert "more than the 315 MB available" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()
    assert list((tmp_path / "tmpdir").iterdir()) == []  # the local copy is deleted
    monkeypatch.setattr(chrome_trace, "_available_memory", lambda: 600 << 20)  # room for the plan: decoded
    with pytest.raises(AssertionError, match="decoded"):
        import_traces(uri, tmp_path / "run")


@pytest.mark.parametrize("command", ["analyze", "info", "dashboard"])
def test_a_run_is_not_read_from_s3(tmp_path, command):
    """Only import reads S3: a command that reads a run, given a URI, says so in one line."""
    r = cli(command, "s3://bkt/runs/job42/", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: s3://bkt/runs/job42: runs are read from a filesystem, not a URI: import the traces")
    assert list(tmp_path.iterdir()) == []


def test_ray_tasks_import_from_s3(s3, local, tmp_path):
    """--ray local: each Ray task copies its own trace from S3 (its worker reads the same AWS environment)."""
    traces, local_run = local
    _upload(s3, traces, "job44")
    r = cli("import", f"s3://{BUCKET}/job44/", "-o", tmp_path / "run", "--ray", "local")
    assert r.returncode == 0, r.stderr
    a, b = _tables(tmp_path / "run"), _tables(local_run)
    assert sorted(a) == sorted(b) and all(a[k].equals(b[k]) for k in a)
    assert [e["source"] for e in _manifest(tmp_path / "run")["ranks"]] == [
        f"s3://{BUCKET}/job44/{n}" for n in ("rank0.json", "rank1.json", "rank2.json", "rank3.json.gz")]
