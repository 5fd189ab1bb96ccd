"""Compilation of the lane kernel with llvmlite (numba's LLVM) for the host CPU, with an on-disk cache of
the object code.

The object code is keyed by the IR text, the target triple, the CPU name, its features and the LLVM version
(sha256 of all five), and stored followed by its own sha256, so that a damaged file is compiled again,
never loaded; files are written to a temporary name and renamed, so a concurrent process reads a whole file
or none. Only the first process on a machine pays the compilation (1-45 s per d and dtype on a 2-core AMD EPYC,
growing with d; double takes about 2.3 times as long as float): a missing object is compiled under an advisory lock on
its name (:func:`companion.cache.file_lock`, in ``.locks`` beside the objects), so processes that need the same
kernel at the same time (two sweep workers, two notebooks, two test lanes in a fresh clone) compile it once; the
others wait and load it.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import tempfile
import threading
from pathlib import Path

from companion.cache import file_lock
from companion.mesa.lanes.driver import module_ir

__all__ = ["compiled"]

_LOCK = threading.Lock()
_COMPILED: dict[tuple[int, str], tuple] = {}  # (d, F) -> (engine, ctypes function)
#: object codes this process compiled (not loaded): (d, F) in order (the tests read it)
COMPILED_HERE: list[tuple[int, str]] = []
_SIG = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 4), *([ctypes.c_void_p] * 10))  # releases the GIL


def _cache_dir() -> str:
    """Where compiled kernels are kept: ``$NUMBA_CACHE_DIR``, else beside numba's cache of this package
    (``__pycache__``), else the temporary directory."""
    for folder in (os.environ.get("NUMBA_CACHE_DIR"), os.path.join(os.path.dirname(__file__), "__pycache__"),
                   os.path.join(tempfile.gettempdir(), f"companion-lanes-{os.getuid()}")):
        if not folder:
            continue
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder
    raise OSError("no writable directory for the compiled mesa lane kernels")


def _target_machine():
    import llvmlite.binding as llvm  # numba's LLVM: imported when a kernel is first compiled or loaded

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return llvm, target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                              features=llvm.get_host_cpu_features().flatten(), opt=3,
                                              codemodel="jitdefault", jit=True)


def compiled(d: int, F: str = "float"):
    """The ctypes function of the kernel for (d, F), compiled on first use (seconds; once per machine, whatever the
    number of processes asking at the same time) or loaded from the disk cache (milliseconds)."""
    key = (d, F)
    with _LOCK:
        if key in _COMPILED:
            return _COMPILED[key][1]
        llvm, tm = _target_machine()
        ir = module_ir(d, F)
        tag = "\n".join([ir, tm.triple, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(),
                         ".".join(map(str, llvm.llvm_version_info))])
        path = os.path.join(_cache_dir(), f"mesa-lanes-d{d}-{F}-{hashlib.sha256(tag.encode()).hexdigest()[:16]}.o")
        obj = _load(path)
        if obj is None:
            with contextlib.ExitStack() as held:
                try:
                    held.enter_context(file_lock(Path(path).parent / ".locks" / f"{os.path.basename(path)}.lock"))
                except OSError:  # no lock to be had (a full disk): compile without one
                    pass
                obj = _load(path)  # compiled by another process while this one waited
                if obj is None:
                    obj = _compile(llvm, tm, ir, path)
                    COMPILED_HERE.append(key)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        fn = _SIG(engine.get_function_address("lanes_sweep"))
        _COMPILED[key] = (engine, fn)
        return fn


def _load(path: str) -> bytes | None:
    """The object code stored at ``path``, or None when it is missing or damaged (the object code is followed by
    its sha256: a damaged file is compiled again, never loaded)."""
    try:
        with open(path, "rb") as fh:
            blob = fh.read()
    except OSError:
        return None
    if len(blob) > 32 and hashlib.sha256(blob[:-32]).digest() == blob[-32:]:
        return blob[:-32]
    return None


def _compile(llvm, tm, ir: str, path: str) -> bytes:
    """Optimise and compile the module ``ir`` for the host, store the object code at ``path`` (with its sha256;
    written to a temporary name and renamed) and return it."""
    mod = llvm.parse_assembly(ir)
    mod.verify()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    obj = tm.emit_object(mod)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(obj + hashlib.sha256(obj).digest())
        os.replace(tmp, path)  # atomic: a concurrent process reads the whole file or none
    except OSError:  # a full or read-only disk: the kernel still runs, compiled again next time
        if os.path.exists(tmp):
            os.unlink(tmp)
    return obj
