"""The live collector's C++ converter (live_convert.cpp): built once per torch version, on first use.

Reading a recorded cycle through torch's Python bindings costs a wrapper object per event and per
attribute (12-20 µs an event); the same walk in C++ over torch's own objects takes about 0.5 µs
an event, on two threads, which is what lets writing a run keep up with `export_chrome_trace`.

The extension is compiled with `torch.utils.cpp_extension` (the compiler flags and pybind11 ABI of
the torch it runs with) into `$NEURON_EXPLORER_NATIVE_DIR`, by default
`~/.cache/neuron-explorer/native/`, under a name that changes with the source, the torch version
and the Python version, so a torch upgrade builds a fresh one. It needs a C++ compiler (`c++`, or
`$CXX`) and ninja (a dependency). Building takes half a minute to two on two cores (EXPECTED_BUILD)
and happens when `profile()` is created, before the job is profiled, never inside a recorded cycle.

`NEURON_EXPLORER_NATIVE`: `auto` (default: build or load it; if that fails, warn and use the
Python converter, which writes the same run, more slowly; a failed build leaves
`build-failed.txt` in its folder so that later runs do not try again until it is deleted), `0`
(always the Python converter), `require` (fail when it cannot be built; retries a failed build:
for CI and benchmarks).

Must not: decide what goes in the tables (the C++ mirrors _live_convert.py, and tests hold them
equal).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import sys
import sysconfig
import threading
import time
import warnings
from pathlib import Path

from ...errors import UsageError
from ...native_build import FAILED_FILE, build_dir, enabled  # noqa: F401  (build_dir: tests name it as native.build_dir)

SOURCE = Path(__file__).with_name("live_convert.cpp")
_lock = threading.Lock()
_state: dict = {}


class NativeUnavailable(UsageError):
    """The C++ converter could not be built or loaded (and NEURON_EXPLORER_NATIVE=require)."""


def mode() -> str:
    if not enabled():
        return "off"
    if os.environ.get("NEURON_EXPLORER_NATIVE", "auto").strip().lower() in ("require", "required", "1", "on", "yes", "true"):
        return "require"
    return "auto"


def module_name() -> str:
    import torch

    key = hashlib.sha256(SOURCE.read_bytes() + f"|{torch.__version__}|{sys.version}|{platform.machine()}".encode()).hexdigest()
    return f"nx_live_{key[:16]}"


EXPECTED_BUILD = "30 s to 2 min on 2 cores"
"""Said when the build starts: 107 s measured on a 2-core machine under a load of 4 (35 s of CPU),
1:43 on a fresh machine (issue 37), about 30 s idle."""

STALE_LOCK_S = 600  # a build takes well under a minute


def load():
    """The compiled module, building it if needed; None when it is off or cannot be had (auto)."""
    m = mode()
    if m == "off":
        return None
    with _lock:
        if "module" in _state:
            return _state["module"]
        try:
            module = _build(retry=m == "require")
        except Exception as e:  # a missing compiler, headers or ninja: the Python path still works
            reason = " ".join(str(e).split())[:400]
            if m == "require":
                raise NativeUnavailable(f"the native converter could not be built: {reason}") from None
            warnings.warn(f"neuron-explorer: the native converter is not available ({reason}); recording with the "
                          "slower Python converter, which writes the same run", RuntimeWarning, stacklevel=3)
            module = None
        _state["module"] = module
        return module


def _build(retry: bool):
    name = module_name()
    out = build_dir() / name
    failed = out / FAILED_FILE
    if failed.is_file() and not retry:
        # one failed build per torch version is enough: every later run would pay for it again
        raise RuntimeError(f"its build failed before; see {failed} (delete that file to try again)")
    out.mkdir(parents=True, exist_ok=True)
    lock = out / "lock"  # torch's build lock: a build killed outright leaves it, and every later one would wait forever
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink(missing_ok=True)
    except FileNotFoundError:
        pass
    built = out / f"{name}.so"
    if built.is_file() and not lock.exists():  # (a lock: another process is building it right now)
        # the name holds the source's hash and the torch and Python versions: a module there was
        # built from exactly this; importing it directly skips torch's rebuild check (~0.2 s)
        spec = importlib.util.spec_from_file_location(name, built)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    import torch

    print(f"neuron-explorer: compiling the native converter for torch {torch.__version__} into {out} "
          f"(once per torch version; {EXPECTED_BUILD}) ...", file=sys.stderr, flush=True)
    import torch.utils.cpp_extension as ext  # (a slow import: only when building)

    path = os.environ.get("PATH", "")
    # torch runs `ninja` from PATH; the one pip installed beside this interpreter counts too
    os.environ["PATH"] = os.pathsep.join([path, sysconfig.get_path("scripts"), os.path.dirname(sys.executable)])
    try:
        module = ext.load(name=name, sources=[str(SOURCE)], build_directory=str(out), verbose=False, **compile_options())
    except Exception as e:
        failed.write_text(f"{type(e).__name__}: {e}\n")
        raise
    finally:
        os.environ["PATH"] = path
    failed.unlink(missing_ok=True)
    return module


def compile_options() -> dict:
    """Options of torch.utils.cpp_extension.load for code that reads torch's profiler objects:
    Kineto's headers (torch ships them in include/kineto) and the layout torch was built with."""
    import torch.utils.cpp_extension as ext

    include = [str(Path(p) / "kineto") for p in ext.include_paths() if (Path(p) / "kineto").is_dir()]
    return {"extra_include_paths": include, "extra_cflags": ["-O2", "-DUSE_KINETO"]}


