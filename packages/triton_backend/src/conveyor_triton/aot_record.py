"""Recording kernel launches as Triton's JIT would compile them, for the
ahead-of-time check (Note [Ahead-of-time check] in ``conveyor_triton.aot``).

A :class:`Launch` is the source text, the jit function's name, Triton's own
specialization of the arguments (the signature, constexprs and attributes
its JIT derives: the binder from ``triton.runtime.jit.create_function_from_signature``
over ``native_specialize_impl``, and its ``_pack_args``; :func:`probe` fails
loudly when the installed Triton has neither) and the compile options.
Keywords that name a kernel parameter are constexprs, the others compile
options (``num_warps``, ``num_stages``). A :class:`Recorder` is a launch
watcher (Note [Launch watchers]) that keeps each distinct launch.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import inspect
import json
import os
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Path_ = tuple[int, ...]


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
