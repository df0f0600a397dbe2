"""The PrivateUse1 test backend of native_fixture/neuron_backend.cpp, built and registered as "neuron".

`load()` compiles the backend once per source and torch version into the native build folder (about two
minutes the first time, then a second), renames PrivateUse1 to "neuron", registers `torch.neuron` and
returns the extension (set_mode, stats, reset_stats). A test script run under `record` imports this module
itself, the way a user's script imports its vendor's package.
"""

from __future__ import annotations

import hashlib
import shutil
import types
from pathlib import Path

SOURCE = Path(__file__).with_name("native_fixture") / "neuron_backend.cpp"
BACKEND = "neuron"


def compiler() -> str | None:
    """The C++ compiler torch.utils.cpp_extension would use, or None (the backend tests then skip)."""
    import os

    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


def build_dir() -> Path:
    import torch

    from neuron_explorer.collectors import native

    key = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode()).hexdigest()[:16]
    return native.build_dir() / f"nx_test_neuron_backend_{key}"


_module = None


def load():
    """The backend's extension, built if needed, with PrivateUse1 renamed and `torch.neuron` registered."""
    global _module
    if _module is not None:
        return _module
    import torch
    import torch.utils.cpp_extension as ext

    from neuron_explorer.collectors import native

    out = build_dir()
    out.mkdir(parents=True, exist_ok=True)
    opts = native.compile_options()
    # -O0: test code whose speed does not matter; its compile is a sixth shorter than at -O2
    opts["extra_cflags"] = [*(f for f in opts["extra_cflags"] if not f.startswith("-O")), "-O0", "-DFMT_HEADER_ONLY"]
    mod = ext.load(name=out.name, sources=[str(SOURCE)], build_directory=str(out), verbose=False, **opts)
    if torch._C._get_privateuse1_backend_name() != BACKEND:
        torch.utils.rename_privateuse1_backend(BACKEND)
    mod.register_hooks()
    if not hasattr(torch, BACKEND):
        torch._register_device_module(BACKEND, _device_module())
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    _module = mod
    return mod


def _device_module() -> types.ModuleType:
    m = types.ModuleType(f"torch.{BACKEND}")
    m.is_available = lambda: True
    m.device_count = lambda: 1
    m.current_device = lambda: 0
    m.set_device = lambda index: None
    m.synchronize = lambda device=None: None
    m.is_initialized = lambda: True
    m._is_in_bad_fork = lambda: False
    m.manual_seed_all = lambda seed: None
    m.get_device_name = lambda index=0: "neuron test backend"
    return m
