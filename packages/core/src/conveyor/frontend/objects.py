"""Python objects in a program's arguments and results.

Note [Python objects in and out]: a program may take plain Python objects
holding tensors (a KV cache) and write to them (``self.k = torch.cat([self.k,
x])``), or return one (transformers' ``DynamicCache``). A graph has tensors
only, so capture represents the objects around it:

* an argument object (an instance with a ``__dict__``, and the lists, tuples
  and dicts it holds) is *walked*: its tensors become graph inputs after the
  call's own tensors, and its structure (types, attribute names, ``None``-ness,
  non-tensor values) is part of the compile-cache key;
* during a trace the caller's objects hold fake tensors in place of their
  tensors and are restored afterwards, whatever happens (Note [Tracing on
  stand-ins] for objects): the caller never sees a fake;
* what the program wrote to them (a rebound attribute, a new list) is read back
  after the trace as an :class:`Effect`: new tensors become extra graph
  outputs and a run-time epilogue writes the real ones into the caller's
  objects, found by their position in the walk;
* a returned object that is not a pytree node is described by a
  :data:`Recipe` and rebuilt on every call with that call's tensors, so no two
  calls share an object.

What cannot be described this way (an object with ``__slots__`` holding a
tensor in a result; writes to state the program reaches without taking it as
an argument: ``conveyor.frontend.reachable``) makes capture raise
:class:`~conveyor.errors.EagerFallback`: that specialization runs eagerly,
with a warning that names the object.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from conveyor.errors import CaptureError, EagerFallback

HINT = "use torch.compile(fn, backend='conveyor'), which follows Python objects with dynamo"


def is_object(v: Any) -> bool:
    """A plain instance conveyor walks into: has a ``__dict__``, is not a
    tensor, module, class, function or registered pytree node."""
    return (
        hasattr(v, "__dict__")
        and not isinstance(
            v,
            (
                torch.Tensor,
                torch.nn.Module,
                type,
                types.FunctionType,
                types.MethodType,
                types.BuiltinFunctionType,
                types.ModuleType,
                enum.Enum,
            ),
        )
        and type(v) not in pytree.SUPPORTED_NODES
        and not callable(v)
    )


def _is_container(v: Any) -> bool:
    return type(v) in (list, dict) or is_object(v)


# -- arguments ----------------------------------------------------------------
@dataclass
class ObjectArgs:
    """The plain objects among one call's pytree leaves, walked.

    :ivar positions: leaf positions of the root objects.
    :ivar roots: the container index of each root object.
    :ivar key: the structure of everything reachable, for the cache key.
    :ivar tensors: the tensors found, in walk order (graph inputs).
    :ivar containers: the mutable containers found (objects, lists, dicts),
        in walk order; effects name them by this position.
    """

    positions: tuple[int, ...]
    roots: tuple[int, ...]
    key: Hashable
    tensors: list[torch.Tensor]
    containers: list[Any]


def walk_args(leaves: Sequence[Any]) -> ObjectArgs | None:
    """The objects among ``leaves`` (``None`` when there are none)."""
    positions = tuple(i for i, v in enumerate(leaves) if is_object(v))
    if not positions:
        return None
    tensors: list[torch.Tensor] = []
    containers: list[Any] = []
    seen: dict[int, int] = {}

    def describe(v: Any) -> Hashable:
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return "T"
        if _is_container(v) or type(v) is tuple:
            if id(v) in seen:
                return ("alias", seen[id(v)])
            if type(v) is not tuple:
                seen[id(v)] = len(containers)
                containers.append(v)
            if type(v) is list:
                return ("list", tuple(describe(x) for x in v))
            if type(v) is tuple:
                return ("tuple", tuple(describe(x) for x in v))
            items = v.items() if type(v) is dict else vars(v).items()
            return (type(v), tuple((k, describe(x)) for k, x in items))
        try:
            hash(v)
        except TypeError:
            return ("id", id(v))
        return ("value", type(v), v)

    key = tuple(describe(leaves[i]) for i in positions)
    roots = tuple(seen[id(leaves[i])] for i in positions)
    return ObjectArgs(positions, roots, key, tensors, containers)


def _slots(c: Any) -> Iterator[tuple[Any, Any]]:
    if type(c) is list:
        return iter(enumerate(c))
    return iter((c if type(c) is dict else vars(c)).items())


def _contents(c: Any) -> Any:
    return list(c) if type(c) is list else dict(c if type(c) is dict else vars(c))


def _set_contents(c: Any, contents: Any) -> None:
    if type(c) is list:
        c[:] = contents
        return
    d = c if type(c) is dict else vars(c)
    d.clear()
    d.update(contents)


class Installed:
    """The caller's objects holding fakes during one trace; :meth:`restore`
    puts every container back as it was."""

    def __init__(self, objects: ObjectArgs, fakes: Sequence[Any]) -> None:
        self.objects = objects
        self.saved = [_contents(c) for c in objects.containers]
        fake_iter = iter(fakes)
        index = {id(c): k for k, c in enumerate(objects.containers)}
        done: set[int] = set()

        def substitute(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return next(fake_iter)
            if type(v) is tuple:
                return tuple(substitute(x) for x in v)
            if id(v) in index and id(v) not in done:
                done.add(id(v))
                c = v
                new = {k: substitute(x) for k, x in _slots(c)}
                _set_contents(c, list(new.values()) if type(c) is list else new)
            return v

        for k in objects.roots:
            substitute(objects.containers[k])
        # what the program sees at the start: a write is anything different from this
        self.installed = [_contents(c) for c in objects.containers]

    def restore(self) -> None:
        for c, contents in zip(self.objects.containers, self.saved, strict=True):
            _set_contents(c, contents)


# -- recipes: values rebuilt at run time from tensors and objects ---------------
@dataclass(frozen=True)
class Out:
    """A graph output (position among the recipe tensors)."""

    index: int


@dataclass(frozen=True)
class Ref:
    """The caller's container at this walk position."""

    index: int


@dataclass(frozen=True)
class Const:
    value: Any


@dataclass(frozen=True)
class New:
    """A container built on every call: ``kind`` is ``list``, ``tuple``,
    ``dict`` or the class of a plain object."""

    kind: Any
    items: tuple[tuple[Any, Any], ...]


Recipe = Out | Ref | Const | New


class RecipeBuilder:
    """Describes values produced by a trace; collects the tensors they hold
    (which become graph outputs)."""

    def __init__(self, containers: Sequence[Any]) -> None:
        self.index = {id(c): k for k, c in enumerate(containers)}
        self.tensors: list[torch.Tensor] = []

    def describe(self, v: Any, where: str, depth: int = 0) -> Recipe:
        if isinstance(v, torch.Tensor):
            self.tensors.append(v)
            return Out(len(self.tensors) - 1)
        if id(v) in self.index:
            return Ref(self.index[id(v)])
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            # not a constant of the graph: the caller compiles with static sizes instead
            raise CaptureError(f"capture: {where} is a symbolic size ({v}), which a result cannot hold as a constant")
        if depth > 20:
            raise EagerFallback(f"{where} nests Python objects too deeply to rebuild; {HINT}")
        if type(v) in (list, tuple):
            return New(type(v), tuple((i, self.describe(x, f"{where}[{i}]", depth + 1)) for i, x in enumerate(v)))
        if type(v) is dict or is_object(v):
            items = v.items() if type(v) is dict else vars(v).items()
            kind = dict if type(v) is dict else type(v)
            return New(kind, tuple((k, self.describe(x, f"{where}.{k}", depth + 1)) for k, x in items))
        if _holds_tensor(v):
            raise EagerFallback(f"{where} is a {type(v).__qualname__} holding tensors that conveyor cannot rebuild; {HINT}")
        return Const(v)


def _holds_tensor(v: Any) -> bool:
    if isinstance(v, torch.Tensor):
        return True
    if isinstance(v, (str, bytes, int, float, bool, type(None), torch.dtype, torch.device)):
        return False
    if isinstance(v, (list, tuple, set, frozenset)):
        return any(_holds_tensor(x) for x in v)
    if isinstance(v, dict):
        return any(_holds_tensor(x) for x in v.values())
    slots = getattr(type(v), "__slots__", ())
    return any(_holds_tensor(getattr(v, s, None)) for s in ((slots,) if isinstance(slots, str) else slots))


def build(recipe: Recipe, outs: Sequence[Any], containers: Sequence[Any]) -> Any:
    """The value a recipe describes, with this call's tensors and objects."""
    if isinstance(recipe, Out):
        return outs[recipe.index]
    if isinstance(recipe, Ref):
        return containers[recipe.index]
    if isinstance(recipe, Const):
        return recipe.value
    values = [(k, build(r, outs, containers)) for k, r in recipe.items]
    if recipe.kind in (list, tuple):
        return recipe.kind(v for _, v in values)
    if recipe.kind is dict:
        return dict(values)
    obj = recipe.kind.__new__(recipe.kind)
    vars(obj).update(values)
    return obj


# -- effects: writes to argument objects ------------------------------------------
@dataclass(frozen=True)
class Effect:
    """A write the program made to the caller's container at walk position
    ``index``: the new contents of the slots it changed (all of them for a
    list), and the attribute / key names it removed."""

    index: int
    changed: tuple[tuple[Any, Recipe], ...]
    removed: tuple[Any, ...] = ()
    whole_list: bool = False


def read_effects(installed: Installed, builder: RecipeBuilder) -> tuple[Effect, ...]:
    """What the program wrote to the installed objects, as effects."""
    effects: list[Effect] = []
    for k, (c, before) in enumerate(zip(installed.objects.containers, installed.installed, strict=True)):
        now = _contents(c)
        if type(c) is list:
            if len(now) != len(before) or any(a is not b for a, b in zip(now, before, strict=True)):
                items = tuple((i, builder.describe(v, f"argument object #{k}[{i}]")) for i, v in enumerate(now))
                effects.append(Effect(k, items, whole_list=True))
            continue
        changed = tuple(
            (name, builder.describe(v, f"{type(c).__qualname__}.{name}"))
            for name, v in now.items()
            if name not in before or before[name] is not v
        )
        removed = tuple(name for name in before if name not in now)
        if changed or removed:
            effects.append(Effect(k, changed, removed))
    return tuple(effects)


def apply_effects(effects: Sequence[Effect], outs: Sequence[Any], containers: Sequence[Any]) -> None:
    """The run-time epilogue: write the effects into this call's objects."""
    for e in effects:
        c = containers[e.index]
        values = [(name, build(r, outs, containers)) for name, r in e.changed]
        if e.whole_list:
            c[:] = [v for _, v in values]
            continue
        d = c if type(c) is dict else vars(c)
        for name in e.removed:
            d.pop(name, None)
        d.update(values)


@dataclass(frozen=True)
class ObjectPlan:
    """How a call's results and argument objects are finished at run time.

    :ivar n_plain: graph outputs that are tensor leaves of the result; the
        rest are the tensors of ``recipes`` and ``effects``.
    :ivar recipes: result leaves (by position) that are objects, rebuilt.
    :ivar effects: writes to the caller's objects, replayed first.
    """

    n_plain: int
    recipes: tuple[tuple[int, Recipe], ...]
    effects: tuple[Effect, ...]

    def finish(self, outs: Sequence[Any], containers: Sequence[Any], leaves: list[Any]) -> None:
        """Replay the effects, then fill the object leaves of the result."""
        extra = outs[self.n_plain :]
        apply_effects(self.effects, extra, containers)
        for pos, recipe in self.recipes:
            leaves[pos] = build(recipe, extra, containers)


