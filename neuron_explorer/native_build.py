"""Compiling the package's small C++ libraries (plain C ABI, loaded with ctypes) on first use.

Each is built with the system's C++ compiler (`$CXX`, else `c++`) into the native build folder
(`$NEURON_EXPLORER_NATIVE_DIR`, default `~/.cache/neuron-explorer/native/`), under a name that
changes with its source, so an upgrade builds a fresh one. A failed build leaves
`build-failed.txt` beside it and is not retried until that file is deleted. `NEURON_EXPLORER_NATIVE=0`
turns them all off (each has a Python path that gives the same result, more slowly).

Must not: import anything of the package but errors (the store and the collectors both use it).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

FAILED_FILE = "build-failed.txt"


def enabled() -> bool:
    return os.environ.get("NEURON_EXPLORER_NATIVE", "auto").strip().lower() not in ("0", "off", "no", "false", "python")


def build_dir() -> Path:
    env = os.environ.get("NEURON_EXPLORER_NATIVE_DIR")
    return Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "neuron-explorer" / "native"


def compile_library(so: Path, args: list[str], what: str, expected: str) -> None:
    """Build `so` with the C++ compiler and `args` (sources, flags; not the output), saying so on
    stderr with the `expected` time first (the build prints nothing else). Raises RuntimeError
    naming why when it cannot; the failure is remembered beside `so`."""
    failed = so.parent / FAILED_FILE
    if failed.is_file():
        raise RuntimeError(f"its build failed before; see {failed}")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        raise RuntimeError("no C++ compiler")
    so.parent.mkdir(parents=True, exist_ok=True)
    print(f"neuron-explorer: compiling {what} into {so.parent} (once; {expected}) ...", file=sys.stderr, flush=True)
    tmp = so.with_name(f".{so.name}.{uuid.uuid4().hex[:8]}")
    res = subprocess.run([cxx, *args, "-o", str(tmp)], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        failed.write_text(res.stderr[-4000:])
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"the build failed; see {failed}")
    os.replace(tmp, so)  # another process building it meanwhile writes the same file


FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC")
"""How NativeLibrary's sources are compiled (part of the build's name: changed flags build anew). -O3:
the trace reader takes 8-10% less CPU than at -O2 (bench/README.md, "The flows held as codes, the reader at -O3"); no
-march=native, so that a build folder shared by machines of different CPUs stays usable."""

_UNSET = object()


class NativeLibrary:
    """One of the package's C++ libraries: its `sources`, built on first use into the native build
    folder under a name that changes with them (`path`), loaded once per process (`load`) with
    `declare(lib)` setting its functions' types. When it cannot be built or loaded, one line on
    stderr says `what` is not available and what runs instead (`fallback`), and `load` returns None."""

    def __init__(self, name: str, sources: tuple[Path, ...], what: str, expected: str, fallback: str,
                 declare: Callable[[ctypes.CDLL], None]):
        self.name, self.sources, self.what, self.expected, self.fallback, self.declare = name, sources, what, expected, fallback, declare
        self._lock = threading.Lock()
        self._lib = _UNSET

    def path(self) -> Path:
        key = hashlib.sha256(b"".join(s.read_bytes() for s in self.sources) + " ".join(FLAGS).encode()).hexdigest()[:16]
        return build_dir() / f"{self.name}_{key}" / f"{self.name}.so"

    def build_and_load(self) -> ctypes.CDLL:
        """Build (when not built yet) and load; raises OSError / RuntimeError when it cannot."""
        so = self.path()
        if not so.is_file():
            compile_library(so, [*FLAGS, *map(str, self.sources)], self.what, self.expected)
        lib = ctypes.CDLL(str(so))
        self.declare(lib)
        return lib

    def load(self, build: bool = True) -> ctypes.CDLL | None:
        """The loaded library, building it first if needed; None when it is off or cannot be built.
        `build=False`: only if this process has loaded it or can load it without compiling (a
        caller that must never wait for a compiler); a failure then is not remembered or said."""
        if not enabled():
            return None
        with self._lock:
            if self._lib is _UNSET:
                if not build:
                    if not self.path().is_file():
                        return None
                    try:
                        self._lib = self.build_and_load()
                    except OSError:
                        return None
                    return self._lib
                try:
                    self._lib = self.build_and_load()
                except (OSError, subprocess.SubprocessError, RuntimeError) as e:
                    print(f"neuron-explorer: {self.what} is not available ({' '.join(str(e).split())[:200]}); {self.fallback}",
                          file=sys.stderr, flush=True)
                    self._lib = None
            return self._lib
