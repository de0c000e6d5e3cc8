"""Why a call compiles again, and which cache served it, in words.

Note [Recompile reasons]: both entry points key their entries by a tuple
(``conveyor.compile``: :class:`CallKey`; the dynamo backend: :class:`DynamoKey`)
whose core part is :func:`conveyor.runtime.cache.call_key`. Where an entry
point decides that a call misses its memory cache, it logs at INFO on the
``conveyor`` logger what differs between the call's key and the closest key
it already holds, per input and property, old and new, as
``TORCH_LOGS=recompiles`` does::

    recompiling f: input x: size[0] 8 -> 16 (memory cache miss, key 3f2a9c1b07de)

A first compile says ``compiling f: first call``; the first reuse of an entry
by its key (``conveyor.compile``'s full key, a symbolic entry whose size
guards hold, a static entry of a dynamo graph) says ``memory cache hit``; the
disk cache (``conveyor.runtime.disk_cache``) says ``disk cache hit`` /
``disk cache miss`` with its own key's first 12 hex digits. Calls served by
an entry's per-call guard (Note [A guard per entry]) log nothing: their hit
was logged when the key first reached the entry. Nothing here runs unless
the ``conveyor`` logger is enabled for INFO: the key's hash and the
comparison are made on a miss only, and only then.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import torch.utils._pytree as pytree

log = logging.getLogger("conveyor")


class CallKey(NamedTuple):
    """The memory-cache key of one ``conveyor.compile`` call (a tuple: its
    fields only name the positions)."""

    structure: Hashable  #: the argument structure (pytree spec, objects' structure)
    values: tuple[tuple[int, Any], ...]  #: non-tensor arguments by leaf position
    training: Hashable  #: the module's training flags
    core: Hashable  #: ``cache.call_key`` of the flat inputs
    stages: tuple[Hashable, ...]  #: each keyed stage's ``cache_key``
    boundary: Hashable  #: tensor subclasses' metadata
    hooks: Hashable  #: the module's forward hooks
    tree: Hashable  #: the module's tree


class DynamoKey(NamedTuple):
    """The key of one call of a dynamo graph (``conveyor.dynamo``)."""

    core: Hashable  #: ``cache.call_key``, or what dynamo's guards leave out (``dynamo._unguarded_key``)
    stages: tuple[Hashable, ...]
    values: tuple[Any, ...]  #: non-tensor inputs
    items: tuple[tuple[int, Any], ...]  #: values of 0-d tensors read with ``.item()``


def enabled() -> bool:
    return log.isEnabledFor(logging.INFO)


def short_hash(key: Hashable) -> str:
    """12 hex digits naming a memory-cache key in the log (stable within a process)."""
    return hashlib.sha256(repr(key).encode()).hexdigest()[:12]


# -- naming the flat inputs -------------------------------------------------
def leaf_names(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> list[str]:
    """A name for each pytree leaf of ``(args, kwargs)``: the parameter it was
    passed as, with the path inside it (``x``, ``batch['ids']``, ``pair[1]``)."""
    try:
        params = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    names = []
    for path, _ in pytree.tree_flatten_with_path((tuple(args), kwargs))[0]:
        top, where, rest = path[0], path[1], path[2:]
        index = getattr(where, "idx", None)
        if getattr(top, "idx", 0) == 0 and isinstance(index, int):
            head = params[index] if index < len(params) else f"args[{index}]"
        else:
            head = str(getattr(where, "key", where))
        names.append(head + "".join(str(k) for k in rest))
    return names


def flat_names(
    state_names: Sequence[str], leaves: Sequence[str], tensor_leaves: Sequence[int], n_flat: int
) -> list[str]:
    """Names of ``conveyor.compile``'s flat inputs: lifted parameters and
    buffers, the call's tensor leaves, then tensors of argument objects."""
    names = [f"parameter/buffer {n}" for n in state_names] + [leaves[i] for i in tensor_leaves]
    return names + [f"tensor {k} inside an argument object" for k in range(n_flat - len(names))]


# -- what differs -----------------------------------------------------------
_FAST = ("type", "dtype", "device", "size", "stride", "storage_offset", "requires_grad", "is_leaf")
_GENERAL = ("type", "dtype", "device", "layout", "size", "stride", "storage_offset", "requires_grad", "is_leaf")
_SHAPELESS = ("type", "dtype", "device", "requires_grad", "is_leaf")
_FIELDS = {len(f): f for f in (_FAST, _GENERAL, _SHAPELESS)}


def _show(v: Any) -> str:
    if isinstance(v, type):
        return v.__qualname__
    return str(v)


def input_changes(old: Any, new: Any, name: str) -> list[str]:
    """What differs between two per-input entries of ``cache.call_key``."""
    if old == new:
        return []
    fields = _FIELDS.get(len(old)) if isinstance(old, tuple) and isinstance(new, tuple) else None
    if fields is None or len(old) != len(new):
        return [f"input {name}: {_show(old)} -> {_show(new)}"]
    found = []
    for field, a, b in zip(fields, old, new, strict=True):
        if a == b:
            continue
        if field in ("size", "stride") and a is not None and b is not None and len(a) == len(b):
            found += [f"input {name}: {field}[{d}] {x} -> {y}" for d, (x, y) in enumerate(zip(a, b)) if x != y]
        else:
            found.append(f"input {name}: {field} {_show(tuple(a) if field in ('size', 'stride') and a is not None else a)}"
                         f" -> {_show(tuple(b) if field in ('size', 'stride') and b is not None else b)}")
    return found


def core_changes(old: Any, new: Any, names: Sequence[str], leaf_positions: Sequence[int] | None = None) -> list[str]:
    """What differs between two ``cache.call_key`` values; with
    ``leaf_positions``, between two of the dynamo backend's unguarded keys
    (same four positions, the third the leafness of the inputs at
    ``leaf_positions``: ``conveyor.dynamo._unguarded_key``)."""
    if old == new:
        return []
    grad_o, cast_o, per_o, groups_o = old
    grad_n, cast_n, per_n, groups_n = new
    found = []
    if grad_o != grad_n:
        found.append(f"grad mode {'on' if grad_o else 'off'} -> {'on' if grad_n else 'off'}")
    if cast_o != cast_n:
        found.append(f"autocast (cpu, cuda) dtypes {cast_o} -> {cast_n}")
    if per_o != per_n and leaf_positions is not None:
        for i, a, b in zip(leaf_positions, per_o, per_n, strict=False):
            if a != b:
                found.append(f"input {names[i] if i < len(names) else f'#{i}'}: is_leaf {a} -> {b}")
    elif per_o != per_n:
        if len(per_o) != len(per_n):
            found.append(f"number of inputs {len(per_o)} -> {len(per_n)}")
        else:
            for i, (a, b) in enumerate(zip(per_o, per_n, strict=True)):
                found += input_changes(a, b, names[i] if i < len(names) else f"#{i}")
    if groups_o != groups_n:
        found.append(f"which inputs share storage {_sharing(groups_o, names)} -> {_sharing(groups_n, names)}")
    return found


def _sharing(groups: Any, names: Sequence[str]) -> str:
    if not isinstance(groups, tuple):
        return str(groups)
    pairs = [
        f"{names[i] if i < len(names) else i}~{names[g] if g < len(names) else g}"
        for i, g in enumerate(groups)
        if isinstance(g, int) and g >= 0 and g != i
    ]
    return "(" + ", ".join(pairs) + ")" if pairs else "(none)"


def stage_changes(old: tuple[Hashable, ...], new: tuple[Hashable, ...], stages: Sequence[str]) -> list[str]:
    """What differs between the keyed stages' ``cache_key`` values (``stages``: their names)."""
    return [
        f"stage {stages[i] if i < len(stages) else i}'s cache_key {clip(repr(a))} -> {clip(repr(b))}"
        for i, (a, b) in enumerate(zip(old, new, strict=False))
        if a != b
    ]


def clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def call_changes(
    old: CallKey, new: CallKey, names: Sequence[str], leaves: Sequence[str], stages: Sequence[str]
) -> list[str]:
    """What differs between two ``conveyor.compile`` keys."""
    found: list[str] = []
    if old.structure != new.structure:
        found.append("argument structure (the pytree of arguments, argument objects' attributes) changed")
    elif old.values != new.values:
        before, after = dict(old.values), dict(new.values)
        for i in sorted(set(before) | set(after)):
            if before.get(i, _MISSING) != after.get(i, _MISSING):
                name = leaves[i] if i < len(leaves) else f"#{i}"
                found.append(f"non-tensor input {name}: {before.get(i, '-')!r} -> {after.get(i, '-')!r}")
    if old.training != new.training:
        found.append("module training flags changed (.train()/.eval())")
    if old.tree != new.tree:
        found.append("module tree changed (a submodule, parameter or buffer added, removed or replaced)")
    if old.hooks != new.hooks:
        found.append("module forward hooks changed")
    if old.boundary != new.boundary:
        found.append("tensor subclass metadata changed")
    if not found or old.core != new.core:
        found += core_changes(old.core, new.core, names)
    if old.stages != new.stages:
        found += stage_changes(old.stages, new.stages, stages)
    return found


_MISSING = object()


def closest(
    keys: Sequence[Any], new: Any, diff: Callable[[Any, Any], list[str]]
) -> tuple[Any, list[str]] | None:
    """The held key that differs from ``new`` in the fewest properties, and
    what differs (``None`` when nothing is held)."""
    best: tuple[Any, list[str]] | None = None
    for key in keys:
        changes = diff(key, new)
        if best is None or len(changes) < len(best[1]):
            best = (key, changes)
    return best


def miss(name: str, key: Hashable, held: Sequence[Any], diff: Callable[[Any, Any], list[str]], how: str = "") -> None:
    """Log a memory-cache miss of ``name``'s call keyed ``key``: a first
    compile, or a recompile with what differs from the closest held key."""
    found = closest(held, key, diff)
    extra = f"; {how}" if how else ""
    if found is None:
        log.info("compiling %s: first call (memory cache miss, key %s%s)", name, short_hash(key), extra)
        return
    old, changes = found
    log.info(
        "recompiling %s: %s (memory cache miss, key %s; closest entry key %s%s)",
        name,
        "; ".join(changes) or "a key that differs in what no property names",
        short_hash(key),
        short_hash(old),
        extra,
    )


def hit(name: str, key: Hashable, how: str = "") -> None:
    log.info("memory cache hit %s: key %s%s", name, short_hash(key), f" ({how})" if how else "")
