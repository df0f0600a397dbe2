"""Every compile on first use says so on stderr with the time to expect, before the compiler runs
(issue 37: the demo's first run compiled for 1:43 with nothing shown)."""

from __future__ import annotations

import subprocess

import pytest

from neuron_explorer import native_build


def test_compile_library_says_what_and_how_long_before_the_compiler_runs(tmp_path, monkeypatch, capsys):
    said_before = []

    def compiler(cmd, **kw):  # the compiler: what stderr held when it started
        said_before.append(capsys.readouterr().err)
        return subprocess.CompletedProcess(cmd, 1, "", "x.cpp: error")

    monkeypatch.setenv("CXX", "c++")
    monkeypatch.setattr(native_build.subprocess, "run", compiler)
    so = tmp_path / "lib" / "x.so"
    with pytest.raises(RuntimeError, match="the build failed"):
        native_build.compile_library(so, ["x.cpp"], "the test library", "about 5 s on 2 cores")
    assert said_before == [f"neuron-explorer: compiling the test library into {so.parent} (once; about 5 s on 2 cores) ...\n"]


def test_each_library_names_its_expected_time(monkeypatch, tmp_path):
    from neuron_explorer import native_build
    from neuron_explorer.collectors import _json_native

    asked = []
    monkeypatch.setattr(native_build, "compile_library", lambda so, args, what, expected: asked.append((what, expected)))
    monkeypatch.setattr(_json_native.LIBRARY, "path", lambda: tmp_path / "nx_json.so")
    try:
        _json_native.LIBRARY.build_and_load()
    except OSError:
        pass  # nothing was built: loading it fails after the notice
    assert asked == [("the fast trace reader", "about 5 s on 2 cores")]
