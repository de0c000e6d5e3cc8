"""Compile generated kernels with the real Triton compiler, ahead of time.

Note [Ahead-of-time check]: without a GPU the backend's kernels run in
Triton's interpreter, which accepts code the GPU compiler refuses and says
nothing about the machine code. This module records each launch as Triton's
JIT would compile it (a :class:`Launch`: source, signature, constexprs,
attributes, options) through the launch watchers (Note [Launch watchers]),
then compiles every distinct one with ``triton.compile`` for CUDA targets
(sm_90, sm_80) in separate processes with ``TRITON_INTERPRET=0`` (the
interpreter choice is fixed at Triton's first import), and reads the PTX and
ptxas's report into :class:`PtxStats`.

It knows nothing of the code generator's argument convention: a launch is
the source text, the jit function's name, the positional arguments and the
launch keywords. Keywords that name a kernel parameter are constexprs,
the others compile options (``num_warps``, ``num_stages``). The signature is
Triton's own specialization of the arguments: the binder its JIT builds
(``triton.runtime.jit.create_function_from_signature`` over
``native_specialize_impl``) and its ``_pack_args``; :func:`probe` fails
loudly when the installed Triton has neither.

    recorder = aot.Recorder()
    with metrics.watching_launches(recorder):
        compiled(x)
    results = aot.compile_launches(recorder.launches(), archs=(90, 80))
    assert not [r for r in results if r.error], aot.errors(results)

``python -m conveyor_triton.aot launches.json`` compiles launches saved with
:func:`save` and prints a table. The pool's workers run this file as a script
(``--worker``): they import Triton alone, none of conveyor.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.util
import inspect
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: CUDA targets the check compiles for by default (compute capability)
ARCHS: tuple[int, ...] = (90, 80)

Path_ = tuple[int, ...]


# ---------------------------------------------------------------------------
# Recording: one Launch per distinct (source, specialization, options)


@dataclass(frozen=True)
class Launch:
    """One launch as Triton's JIT would compile it; JSON-able and hashable.

    ``signature`` maps each parameter to Triton's type (``*fp32``, ``i32``,
    ``constexpr``, ...); ``constexprs`` and ``attrs`` are keyed by argument
    path (a tuple of indices, as ``ASTSource`` takes them); ``attrs`` holds
    only non-empty attribute lists (``tt.divisibility``)."""

    name: str
    source: str
    signature: tuple[tuple[str, Any], ...]
    constexprs: tuple[tuple[Path_, Any], ...]
    attrs: tuple[tuple[Path_, tuple[tuple[str, Any], ...]], ...]
    options: tuple[tuple[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "signature": [list(p) for p in self.signature],
            "constexprs": [[list(k), v] for k, v in self.constexprs],
            "attrs": [[list(k), [list(a) for a in v]] for k, v in self.attrs],
            "options": [list(p) for p in self.options],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Launch:
        return cls(
            name=d["name"],
            source=d["source"],
            signature=tuple((k, _tuplify(v)) for k, v in d["signature"]),
            constexprs=tuple((tuple(k), _tuplify(v)) for k, v in d["constexprs"]),
            attrs=tuple((tuple(k), tuple((a, _tuplify(b)) for a, b in v)) for k, v in d["attrs"]),
            options=tuple((k, _tuplify(v)) for k, v in d["options"]),
        )

    @property
    def key(self) -> str:
        """Short stable id: the kernel name and a hash of the rest."""
        blob = json.dumps(self.to_json(), sort_keys=True).encode()
        return f"{self.name}-{hashlib.sha256(blob).hexdigest()[:10]}"


def _tuplify(v: Any) -> Any:
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        return tuple(_jsonable(x) for x in v)
    raise TypeError(f"a launch value that is not a plain scalar: {v!r} ({type(v).__name__})")


@dataclass(frozen=True)
class _Binder:
    """What Triton's JIT derives from a kernel's signature, for one source."""

    params: tuple[str, ...]
    kparams: tuple[Any, ...]
    bind: Callable[..., Any]


@functools.cache
def _backend(arch: int = 90) -> Any:
    from triton.backends import backends
    from triton.backends.compiler import GPUTarget

    if "nvidia" not in backends:
        raise RuntimeError(f"Triton has no CUDA backend here (backends: {sorted(backends)})")
    return backends["nvidia"].compiler(GPUTarget("cuda", arch, 32))


def probe() -> None:
    """Check that the installed Triton has the specialization this module
    reuses (Note [Ahead-of-time check]); raise ``RuntimeError`` naming what is
    missing otherwise."""
    missing = []
    try:
        from triton._C.libtriton import native_specialize_impl  # noqa: F401
    except ImportError:
        missing.append("triton._C.libtriton.native_specialize_impl")
    import triton.runtime.jit as jit

    for name in ("create_function_from_signature", "KernelParam", "JITFunction"):
        if not hasattr(jit, name):
            missing.append(f"triton.runtime.jit.{name}")
    if not hasattr(getattr(jit, "JITFunction", None), "_pack_args"):
        missing.append("triton.runtime.jit.JITFunction._pack_args")
    if missing:
        import triton

        raise RuntimeError(
            f"Triton {triton.__version__} lacks the JIT specialization the ahead-of-time check reuses: "
            + ", ".join(missing)
        )


@functools.lru_cache(maxsize=4096)
def _binder(source: str, name: str) -> _Binder:
    """Triton's binder for the jit function ``name`` in ``source``, built from
    the parsed signature (the source is not run: in the interpreter the
    decorator makes no ``JITFunction``)."""
    probe()
    import triton.runtime.jit as jit

    fn = next(
        (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name),
        None,
    )
    if fn is None:
        raise ValueError(f"no function {name!r} in the kernel source")
    dns: set[Any] = set()
    dns_align: set[Any] = set()
    for deco in fn.decorator_list:
        if isinstance(deco, ast.Call):
            for kw in deco.keywords:
                if kw.arg == "do_not_specialize":
                    dns = set(ast.literal_eval(kw.value))
                elif kw.arg == "do_not_specialize_on_alignment":
                    dns_align = set(ast.literal_eval(kw.value))
    args = fn.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise ValueError(f"{name}: only plain positional parameters are supported")
    defaults = [inspect.Parameter.empty] * (len(args.args) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults
    ]
    params = [
        inspect.Parameter(
            a.arg,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=d,
            annotation=ast.unparse(a.annotation) if a.annotation is not None else inspect.Parameter.empty,
        )
        for a, d in zip(args.args, defaults, strict=True)
    ]
    kparams = tuple(
        jit.KernelParam(i, p, i in dns or p.name in dns, i in dns_align or p.name in dns_align)
        for i, p in enumerate(params)
    )
    bind = jit.create_function_from_signature(inspect.Signature(params), list(kparams), _backend())
    return _Binder(tuple(p.name for p in params), kparams, bind)


def describe(source: Any, args: Sequence[Any], meta: Mapping[str, Any]) -> Launch:
    """The :class:`Launch` Triton's JIT would compile for ``source`` (an object
    with ``.name`` and ``.source``) called with ``args`` and ``meta``."""
    import triton.runtime.jit as jit

    b = _binder(source.source, source.name)
    bound, specialization, _ = b.bind(*args, **meta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Triton 3.9's fp-fusion default notice
        _, signature, constexprs, attrs = jit.JITFunction._pack_args(
            types.SimpleNamespace(params=list(b.kparams)), _backend(), dict(meta), bound, specialization, {}
        )
    options = tuple(sorted((k, _jsonable(v)) for k, v in meta.items() if k not in b.params))
    return Launch(
        name=source.name,
        source=source.source,
        signature=tuple((k, _jsonable(v)) for k, v in signature.items()),
        constexprs=tuple((tuple(k), _jsonable(v)) for k, v in sorted(constexprs.items())),
        attrs=tuple(
            (tuple(k), tuple((str(a[0]), _jsonable(a[1])) for a in v)) for k, v in sorted(attrs.items()) if v
        ),
        options=options,
    )


class Recorder:
    """A launch watcher (``metrics.watching_launches(recorder)``) that keeps
    each distinct :class:`Launch` and how many times it ran. A launch it cannot
    describe is kept as an error naming the kernel."""

    def __init__(self) -> None:
        self.counts: dict[Launch, int] = {}
        self.failures: list[str] = []

    def __call__(self, source: Any, args: Sequence[Any], meta: Mapping[str, Any]) -> None:
        try:
            launch = describe(source, args, meta)
        except Exception as exc:  # noqa: BLE001 (reported with the kernel's name)
            self.failures.append(f"{getattr(source, 'name', source)}: {type(exc).__name__}: {exc}")
            return
        self.counts[launch] = self.counts.get(launch, 0) + 1

    def launches(self) -> list[Launch]:
        return list(self.counts)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@contextlib.contextmanager
def gpu_launch_config() -> Iterator[None]:
    """Launch as on a GPU while running in the interpreter.

    Note [GPU launch configuration on CPU]: the backend picks block sizes
    (and warps, persistent reductions) by the device: in the interpreter,
    where a program costs the same whatever its size, blocks are huge (a
    32768-element tile on 4 warps), which no GPU launch would use and which
    spills and compiles for minutes. Inside this block
    ``$CONVEYOR_TRITON_LAUNCH_FOR`` is ``cuda`` (the default of the stage's
    ``launch_for`` option, Note [Launch configuration] in
    ``conveyor_triton.launch``), so programs compiled here record the kernels
    and launches a GPU would use; they still run in the interpreter, with the
    same values."""
    before = os.environ.get("CONVEYOR_TRITON_LAUNCH_FOR")
    os.environ["CONVEYOR_TRITON_LAUNCH_FOR"] = "cuda"
    try:
        yield
    finally:
        if before is None:
            del os.environ["CONVEYOR_TRITON_LAUNCH_FOR"]
        else:
            os.environ["CONVEYOR_TRITON_LAUNCH_FOR"] = before


def save(launches: Iterable[Launch], path: str | os.PathLike[str]) -> None:
    Path(path).write_text(json.dumps([la.to_json() for la in launches]))


def load(path: str | os.PathLike[str]) -> list[Launch]:
    return [Launch.from_json(d) for d in json.loads(Path(path).read_text())]


# ---------------------------------------------------------------------------
# Reading PTX and ptxas's report


@dataclass(frozen=True)
class PtxStats:
    """What one compiled kernel's PTX and ptxas report say. Loads and stores
    count PTX instructions (one per vector or scalar access a thread makes);
    a vectorized one is ``ld.global.v2``/``.v4``/``.v8``."""

    loads_vector: int = 0
    loads_scalar: int = 0
    stores_vector: int = 0
    stores_scalar: int = 0
    int_divs: int = 0
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack: int | None = None
    shared: int | None = None

    @property
    def vectorized(self) -> bool:
        """Some global load or store is vectorized."""
        return bool(self.loads_vector or self.stores_vector)

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)


_GLOBAL = re.compile(r"^\s*(?:@!?%\w+\s+)?(ld|st)\.global((?:\.[\w:]+)*)", re.M)
_INT_DIV = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:div|rem)\.[su](?:16|32|64)\b", re.M)
_REGS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def ptx_stats(ptx: str, ptxas_log: str = "", shared: int | None = None) -> PtxStats:
    """Count global accesses and integer divisions in ``ptx``; registers,
    spills and stack from ``ptxas_log`` (``ptxas -v``; None when absent)."""
    counts = {"ld": [0, 0], "st": [0, 0]}
    for m in _GLOBAL.finditer(ptx):
        vector = any(part in (".v2", ".v4", ".v8") for part in re.findall(r"\.[\w:]+", m.group(2)))
        counts[m.group(1)][0 if vector else 1] += 1
    regs = _REGS.search(ptxas_log)
    spill = _SPILL.search(ptxas_log)
    return PtxStats(
        loads_vector=counts["ld"][0],
        loads_scalar=counts["ld"][1],
        stores_vector=counts["st"][0],
        stores_scalar=counts["st"][1],
        int_divs=len(_INT_DIV.findall(ptx)),
        registers=int(regs.group(1)) if regs else None,
        stack=int(spill.group(1)) if spill else None,
        spill_stores=int(spill.group(2)) if spill else None,
        spill_loads=int(spill.group(3)) if spill else None,
        shared=shared,
    )


# ---------------------------------------------------------------------------
# Compiling, in worker processes


@dataclass(frozen=True)
class Result:
    """One launch compiled for one target: stats, or the error."""

    key: str
    name: str
    arch: int
    stats: PtxStats | None = None
    error: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Result:
        stats = d.get("stats")
        return cls(**{**d, "stats": PtxStats(**stats) if stats is not None else None})


def errors(results: Iterable[Result]) -> str:
    """The failed compiles, one paragraph each (kernel, target, error)."""
    return "\n\n".join(f"{r.name} (sm_{r.arch}): {r.error}" for r in results if r.error)


def default_workers() -> int:
    """``CONVEYOR_AOT_WORKERS``, else half the CPUs (at least 1, at most 8):
    the compiles are CPU-bound and the machines that run tests are shared."""
    env = os.environ.get("CONVEYOR_AOT_WORKERS")
    if env:
        return max(1, int(env))
    return max(1, min(8, (os.cpu_count() or 1) // 2))


def _worker_env(cache_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0"
    env["TRITON_DUMP_PTXAS_LOG"] = "1"  # registers and spills
    env["TRITON_CACHE_DIR"] = cache_dir  # fresh: a cache hit has no ptxas report
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, without its notice
    env.pop("TRITON_ALWAYS_COMPILE", None)
    return env


def compile_launches(
    launches: Iterable[Launch],
    archs: Sequence[int] = ARCHS,
    workers: int | None = None,
    timeout: float | None = None,
) -> list[Result]:
    """Compile every launch for every target in ``workers`` processes (default
    :func:`default_workers`); a worker that dies fails the kernel it was
    compiling and the rest are compiled by a new one. Results come in the
    order of ``launches`` x ``archs``."""
    jobs = [(la, arch) for la in dict.fromkeys(launches) for arch in archs]
    if not jobs:
        return []
    n = max(1, min(workers or default_workers(), len(jobs)))
    # the longest sources first, dealt round-robin: the workers finish together
    order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i][0].source))
    chunks = [[order[j] for j in range(w, len(order), n)] for w in range(n)]
    results: dict[int, Result] = {}
    with tempfile.TemporaryDirectory(prefix="conveyor-aot-") as tmp:
        pending = [c for c in chunks if c]
        round_ = 0
        while pending:
            procs = []
            for w, chunk in enumerate(pending):
                base = Path(tmp) / f"{round_}-{w}"
                base.mkdir()
                (base / "jobs.json").write_text(
                    json.dumps([{"id": i, "arch": jobs[i][1], "launch": jobs[i][0].to_json()} for i in chunk])
                )
                # run as a script: the worker needs Triton alone, not conveyor's packages
                cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(base)]
                procs.append(
                    (chunk, base, subprocess.Popen(cmd, env=_worker_env(str(base / "cache")),
                                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
                )
            pending = []
            for chunk, base, proc in procs:
                try:
                    out, _ = proc.communicate(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, _ = proc.communicate()
                done = base / "results.jsonl"
                if done.exists():
                    for line in done.read_text().splitlines():
                        if line.strip():
                            d = json.loads(line)
                            i = d.pop("id")
                            results[i] = Result.from_json(d)
                rest = [i for i in chunk if i not in results]
                if rest:
                    la, arch = jobs[rest[0]]
                    tail = out.decode(errors="replace")[-3000:]
                    results[rest[0]] = Result(
                        la.key, la.name, arch,
                        error=f"the compiler process ended (exit status {proc.returncode}) while compiling it:\n{tail}",
                    )
                    if rest[1:]:
                        pending.append(rest[1:])
            round_ += 1
    return [results[i] for i in range(len(jobs))]


def _compile_one(launch: Launch, arch: int, src_dir: Path) -> Result:
    """In a worker (``TRITON_INTERPRET=0``): import the source as a real
    ``JITFunction`` and compile it."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    key = launch.key
    start = time.perf_counter()
    log = io.StringIO()
    try:
        path = src_dir / f"{key}.py"
        if not path.exists():
            path.write_text(launch.source)
        spec = importlib.util.spec_from_file_location(f"conveyor_aot_{key.replace('-', '_')}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, launch.name)
        src = ASTSource(
            fn,
            dict(launch.signature),
            dict(launch.constexprs),
            {k: [list(a) for a in v] for k, v in launch.attrs},
        )
        with contextlib.redirect_stdout(log):  # ptxas's report is printed
            kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=dict(launch.options))
        stats = ptx_stats(kernel.asm["ptx"], log.getvalue(), getattr(kernel.metadata, "shared", None))
        return Result(key, launch.name, arch, stats=stats, seconds=time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 (the point is to report it)
        return Result(
            key, launch.name, arch, error=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - start
        )


def _worker(base: Path) -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("the ahead-of-time worker needs TRITON_INTERPRET=0")
    jobs = json.loads((base / "jobs.json").read_text())
    src_dir = base / "src"
    src_dir.mkdir(exist_ok=True)
    with open(base / "results.jsonl", "a") as out:
        for job in jobs:
            r = _compile_one(Launch.from_json(job["launch"]), job["arch"], src_dir)
            out.write(json.dumps({"id": job["id"], **r.to_json()}) + "\n")
            out.flush()


#: a small kernel known to compile: a batch that includes it tells "this
#: machine cannot compile for CUDA" apart from a bad kernel (:func:`unavailable`)
PROBE = Launch(
    name="aot_probe",
    source=(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def aot_probe(x, n, XBLOCK: tl.constexpr):\n"
        "    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)\n"
        "    tl.store(x + i, tl.load(x + i, mask=i < n) + 1, mask=i < n)\n"
    ),
    signature=(("x", "*fp32"), ("n", "i32"), ("XBLOCK", "constexpr")),
    constexprs=(((2,), 128),),
    attrs=(((0,), (("tt.divisibility", 16),)),),
)


def cannot_compile(probe_result: Result | None) -> str | None:
    """The skip reason when :data:`PROBE` did not compile (None when it did)."""
    if probe_result is None or probe_result.error is None:
        return None
    lines = probe_result.error.strip().splitlines() or ["?"]
    return f"Triton's CUDA backend cannot compile here: {lines[-1]}"


@functools.cache
def unavailable() -> str | None:
    """Why kernels cannot be compiled for CUDA here (None when they can):
    :data:`PROBE` compiled by a worker for sm_80."""
    try:
        from triton.backends import backends
    except ImportError as exc:
        return f"Triton is not installed: {exc}"
    if "nvidia" not in backends:
        return f"Triton has no CUDA backend here (backends: {sorted(backends)})"
    try:
        (r,) = compile_launches([PROBE], archs=(80,), workers=1, timeout=300)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return cannot_compile(r)


# ---------------------------------------------------------------------------
# Summaries


@dataclass
class Summary:
    """Figures over compiled kernels (one target)."""

    kernels: int = 0
    errors: int = 0
    no_vector: int = 0
    loads_vector: int = 0
    loads_scalar: int = 0
    stores_vector: int = 0
    stores_scalar: int = 0
    int_divs: int = 0
    max_registers: int = 0
    spilling: list[str] = field(default_factory=list)
    never_vectorized: list[str] = field(default_factory=list)

    def add(self, r: Result) -> None:
        self.kernels += 1
        if r.stats is None:
            self.errors += 1
            return
        s = r.stats
        if not s.vectorized:
            self.no_vector += 1
            self.never_vectorized.append(r.name)
        self.loads_vector += s.loads_vector
        self.loads_scalar += s.loads_scalar
        self.stores_vector += s.stores_vector
        self.stores_scalar += s.stores_scalar
        self.int_divs += s.int_divs
        self.max_registers = max(self.max_registers, s.registers or 0)
        if s.spills:
            self.spilling.append(r.name)

    @property
    def pct_no_vector(self) -> float:
        return 100.0 * self.no_vector / max(1, self.kernels - self.errors)

    @property
    def pct_loads_vectorized(self) -> float:
        return 100.0 * self.loads_vector / max(1, self.loads_vector + self.loads_scalar)


def summarize(results: Iterable[Result], arch: int = 90) -> Summary:
    s = Summary()
    for r in results:
        if r.arch == arch:
            s.add(r)
    return s


def _main(argv: Sequence[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m conveyor_triton.aot", description=__doc__.split("\n\n")[0])
    p.add_argument("launches", nargs="?", help="a JSON file written by conveyor_triton.aot.save")
    p.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    p.add_argument("--arch", type=int, action="append", help="compute capability (repeatable; default 90 and 80)")
    p.add_argument("--workers", type=int, default=None)
    a = p.parse_args(argv)
    if a.worker:
        _worker(Path(a.worker))
        return 0
    if not a.launches:
        p.error("give a launches file")
    results = compile_launches(load(a.launches), archs=tuple(a.arch or ARCHS), workers=a.workers)
    for r in results:
        s = r.stats
        detail = (
            f"ld v/s {s.loads_vector}/{s.loads_scalar} st v/s {s.stores_vector}/{s.stores_scalar} "
            f"div {s.int_divs} regs {s.registers} spill {s.spill_stores}/{s.spill_loads}"
            if s
            else f"ERROR {r.error}"
        )
        print(f"sm_{r.arch} {r.name}: {detail}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
