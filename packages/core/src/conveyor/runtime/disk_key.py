"""The persistent compile cache's key: everything that changes what the
pipeline makes of one request.

Note [The disk cache key]: a sha256 over

* the format version of the cache files;
* the program: the captured graph's code, the plain-data part of every
  node's ``meta`` (grad-mode regions and the like), the graph's ``meta``,
  and every constant tensor it holds, by value;
* each input: dtype, device, layout, sizes, strides, storage offset,
  ``requires_grad``, leafness, conjugate / negative bits, and which inputs
  share storage; non-tensor inputs by type and value;
* the request's grad mode and label, and the process's autocast, inference
  mode, default dtype and deterministic-algorithms switch;
* the pipeline: each stage in order with its kind, options, and the
  distribution and version that registered it, and the value of its
  ``cache_key`` for this call's inputs (what the stage specializes on, as
  the in-memory cache keys it: an environment switch it reads, which inputs
  are one tensor); a value that is not plain data makes the request
  unkeyable;
* the environment: the versions of Python, torch, every distribution that
  registered a stage and every distribution those depend on directly; a
  distribution installed editable (``pip install -e``) is also fingerprinted
  by the size and modification time of each of its ``.py`` files, since its
  code can change without a new version, and its own requirements are
  followed in turn. Its files are those of the modules Python imports under
  its top-level names, wherever they are found: a checkout put before the
  install on ``PYTHONPATH`` runs its own code, so its files are the ones
  fingerprinted (Note [Fingerprinting what is imported]).

:func:`program_key` returns ``None`` (with the reason) for a request it
cannot key soundly: symbolic sizes (guards the pipeline adds must reach the
live shape environment), a stage registered in-process (its code has no
version), or options, inputs or graph attributes that are not plain data.
Such requests compile as before and are not stored.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import torch
import torch.fx

from conveyor.analysis.signature import CallSignature
from conveyor.frontend.functions import is_apply_function
from conveyor.protocol.stage import Request
from conveyor.runtime import cache

#: bump when the layout of stored entries changes
FORMAT_VERSION = 4  # 2: the header records the key; 3: the stage graphs pickled apart; 4: values loaded on demand


class Unkeyable(Exception):
    """The request cannot be keyed soundly (the message says why)."""


def program_key(pipeline: Any, request: Request) -> tuple[str | None, str]:
    """``(key, "")`` for a request the cache can store, or ``(None, why)``."""
    try:
        parts = (
            FORMAT_VERSION,
            *pipeline_parts(pipeline),
            _stage_keys(pipeline, request),
            _global_part(request),
            _inputs_part(request.inputs),
            _graph_part(request.graph),
        )
    except Unkeyable as exc:
        return None, str(exc)
    return hashlib.sha256(repr(parts).encode()).hexdigest(), ""


# -- the pipeline -------------------------------------------------------------
def pipeline_parts(pipeline: Any) -> tuple[Any, ...]:
    """The environment, and each stage with its options (Note [The disk cache key])."""
    return (environment(_stage_distributions(pipeline)), _pipeline_part(pipeline))


def _stage_distributions(pipeline: Any) -> tuple[str, ...]:
    found = []
    for spec in pipeline.stages:
        registered = pipeline.available[spec.name]
        if registered.distribution is None:
            raise Unkeyable(f"stage {spec.name!r} is registered in-process (its code has no version)")
        found.append(registered.distribution)
    return tuple(sorted(set(found)))


def _pipeline_part(pipeline: Any) -> tuple[Any, ...]:
    return tuple(
        (
            spec.name,
            spec.kind,
            pipeline.available[spec.name].distribution,
            pipeline.available[spec.name].version,
            _plain(pipeline.options[spec.name], f"stage {spec.name!r} options"),
        )
        for spec in pipeline.stages
    )


def _stage_keys(pipeline: Any, request: Request) -> tuple[Any, ...]:
    """Each stage's ``cache_key`` for the request's inputs, as plain data."""
    return stage_keys(pipeline, request.inputs)


def stage_keys(pipeline: Any, inputs: Sequence[Any]) -> tuple[Any, ...]:
    """Each stage's ``cache_key`` for ``inputs``, as plain data."""
    keyed = [spec for spec in pipeline.stages if spec.cache_key is not None]
    if not keyed:
        return ()
    signature = CallSignature.of(inputs)
    return tuple((spec.name, _plain(spec.cache_key(signature), f"stage {spec.name!r} cache_key")) for spec in keyed)


def plain(value: Any, what: str) -> Any:
    """``value`` as plain data with a stable ``repr``, or :class:`Unkeyable`."""
    return _plain(value, what)


def _plain(value: Any, what: str) -> Any:
    """``value`` as plain data with a stable ``repr``, or :class:`Unkeyable`."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    if isinstance(value, Path):
        return ("path", str(value))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_plain(v, what) for v in value))
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((str(k), _plain(v, what)) for k, v in value.items())))
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (type(value).__name__, str(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a stage key's record (SharedStorage)
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        return (kind, tuple((f.name, _plain(getattr(value, f.name), what)) for f in dataclasses.fields(value)))
    raise Unkeyable(f"{what}: a value of type {type(value).__name__} is not plain data")


# -- the request and the process's modes --------------------------------------
def _global_part(request: Request) -> tuple[Any, ...]:
    return global_part(request.grad_enabled, request.label)


def global_part(grad_enabled: bool, label: str) -> tuple[Any, ...]:
    """The request's grad mode and label, and the process's modes."""
    return (
        grad_enabled,
        label,
        cache._autocast_key(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
    )


def inputs_part(inputs: Sequence[Any]) -> tuple[Any, ...]:
    """Each input's metadata (Note [The disk cache key])."""
    return _inputs_part(inputs)


def _inputs_part(inputs: Sequence[Any]) -> tuple[Any, ...]:
    per_input = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            if _symbolic(x):
                raise Unkeyable("an input has symbolic sizes")
            strided = x.layout is torch.strided
            per_input.append(
                (
                    x.dtype,
                    x.device,
                    x.layout,
                    tuple(x.shape),
                    x.stride() if strided else None,
                    x.storage_offset() if strided else None,
                    x.requires_grad,
                    x.is_leaf,
                    x.is_conj(),
                    x.is_neg(),
                )
            )
        elif isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise Unkeyable("an input is a symbolic scalar")
        else:
            per_input.append(_plain(x, "a non-tensor input"))
    return (tuple(per_input), CallSignature.of(inputs).groups)


def _symbolic(t: torch.Tensor) -> bool:
    sizes = (*t.shape, *(t.stride() if t.layout is torch.strided else ()))
    return any(isinstance(s, torch.SymInt) for s in sizes) or (
        t.layout is torch.strided and isinstance(t.storage_offset(), torch.SymInt)
    )


# -- the graph ----------------------------------------------------------------
def _graph_part(gm: torch.fx.GraphModule) -> tuple[Any, ...]:
    return (*nodes_part(gm), _plain(dict(gm.meta), "graph meta"))


def nodes_part(gm: torch.fx.GraphModule) -> tuple[Any, ...]:
    """``gm``'s code, its code generator, the plain-data part of each node's
    ``meta``, and its constants by value (Note [The disk cache key])."""
    node_meta = []
    constants = []
    for node in gm.graph.nodes:
        if is_apply_function(node.target):  # it names its Function by an in-process index
            raise Unkeyable(f"node {node.name} applies a custom autograd Function (Note [Custom autograd functions])")
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and _symbolic(val):
            raise Unkeyable(f"node {node.name} has symbolic sizes")
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise Unkeyable(f"node {node.name} is a symbolic value")
        plain = tuple(sorted((k, v) for k, v in node.meta.items() if k not in _UNKEYED_META and _is_plain(v)))
        if plain:
            node_meta.append((node.name, plain))
        if node.op in ("get_attr", "call_module"):
            constants.append((str(node.target), _constant(gm, str(node.target))))
    codegen = gm.graph._codegen
    pytree_info = getattr(codegen, "pytree_info", None)
    return (
        gm.code,
        type(codegen).__name__,
        repr(pytree_info) if pytree_info is not None else None,
        tuple(node_meta),
        tuple(constants),
    )


#: node meta that does not change the program: autograd's sequence numbers (a
#: process-wide counter) and source locations
_UNKEYED_META = frozenset({"seq_nr", "stack_trace"})


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, (tuple, list)) and all(_is_plain(v) for v in value)


def _constant(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = functools.reduce(getattr, target.split("."), gm)
    if not isinstance(value, torch.Tensor):
        raise Unkeyable(f"graph attribute {target!r} is a {type(value).__name__}, not a tensor")
    if value.layout is not torch.strided or type(value) not in (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer):
        raise Unkeyable(f"graph constant {target!r} is not a plain strided tensor")
    data = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    digest = hashlib.sha256(data.numpy().tobytes()).hexdigest()
    return (value.dtype, tuple(value.shape), value.stride(), value.storage_offset(), value.requires_grad, digest)


# -- the environment ----------------------------------------------------------
@functools.lru_cache(maxsize=16)
def environment(distributions: tuple[str, ...]) -> str:
    """Python's and torch's versions, and those of ``distributions`` and of
    what they depend on directly; editable installs are fingerprinted by their
    sources, and what they depend on is followed in turn (computed once per
    process per set of distributions)."""
    seen: dict[str, Any] = {}
    todo = ["conveyor-core", *distributions]
    while todo:
        name = _normalized(todo.pop())
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            seen[name] = "absent"
            continue
        source = _editable_source(dist)
        seen[name] = (dist.version, _imported_fingerprint(source) if source is not None else None)
        for requirement in dist.requires or ():
            match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
            if match is None or "extra ==" in requirement or _normalized(match.group(0)) in seen:
                continue
            required = _normalized(match.group(0))
            try:
                found = importlib.metadata.distribution(required)
            except importlib.metadata.PackageNotFoundError:
                seen[required] = "absent"
                continue
            if _editable_source(found) is not None:
                todo.append(required)  # its code can change without a version: fingerprinted in turn
            else:
                seen[required] = (found.version, None)  # a version says what it is: not followed further
    parts = (sys.version, torch.__version__, tuple(sorted(seen.items())))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _editable_source(dist: importlib.metadata.Distribution) -> Path | None:
    """The source folder of a distribution installed editable, else ``None``."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    if not info.get("dir_info", {}).get("editable"):
        return None
    url = urlparse(info.get("url", ""))
    if url.scheme != "file":
        return None
    root = Path(unquote(url.path))
    return root / "src" if (root / "src").is_dir() else root


_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "build", "dist", "tests"})


def _imported_fingerprint(source: Path) -> tuple[str, ...]:
    """The fingerprint of an editable distribution's ``source`` folder, and of
    each place outside it that one of its top-level modules is imported from.

    Note [Fingerprinting what is imported]: an editable install says where its
    sources are, but Python imports a top-level name from the first entry of
    ``sys.path`` that has it; a git worktree put first on ``PYTHONPATH`` runs
    the worktree's code while the install still points at the main checkout.
    Fingerprinting only the install's folder would then serve programs that
    the worktree's (different) stages never made. So each top-level module of
    the source folder is looked up as the import system finds it (the module
    already imported, else ``importlib.util.find_spec``, which imports nothing
    for a top-level name), and any location outside the folder is
    fingerprinted too, by its path and its files. The folder itself is
    fingerprinted unless every one of its top-level names is imported from
    elsewhere: then none of its files is run, and an edit there (another
    engineer's, while a worktree is measured) must not change the key."""
    outside: list[str] = []
    used = False  # whether anything may be imported from the source folder itself
    names = _top_level_names(source)
    for name in names:
        locations = _import_locations(name)
        used = used or not locations  # not found: keep the folder (conservative)
        for location in locations:
            if location == source or source in location.parents:
                used = True
            else:
                outside.append(_fingerprint(location))
    return (_fingerprint(source), *outside) if used or not names else tuple(outside)


def _top_level_names(source: Path) -> list[str]:
    names = []
    for entry in sorted(source.iterdir()):
        if entry.is_dir() and entry.name.isidentifier() and entry.name not in _SKIPPED_DIRS:
            names.append(entry.name)
        elif entry.suffix == ".py" and entry.stem.isidentifier():
            names.append(entry.stem)
    return names


def _import_locations(name: str) -> list[Path]:
    """Where the import system takes top-level module ``name`` from: a
    package's folders, or a module's file (nothing when it is not found)."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None) if module is not None else None
    if spec is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    return [Path(spec.origin)] if spec.origin and os.path.isfile(spec.origin) else []


def _fingerprint(root: Path) -> str:
    """Size and modification time of every ``.py`` file under ``root`` (or of
    ``root`` itself, a file)."""
    if root.is_file():
        st = root.stat()
        return hashlib.sha256(repr((str(root), st.st_size, st.st_mtime_ns)).encode()).hexdigest()
    entries = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        for f in sorted(files):
            if f.endswith(".py"):
                st = os.stat(os.path.join(folder, f))
                entries.append((os.path.relpath(os.path.join(folder, f), root), st.st_size, st.st_mtime_ns))
    return hashlib.sha256(repr((str(root), entries)).encode()).hexdigest()
