"""Compiled artifacts as bytes: the pickler of the persistent compile cache.

Note [Picklable run-time callables]: the disk cache (``conveyor.runtime.disk_cache``)
stores what ``Pipeline.compile`` returns, the run-time callable and the graph
after each stage, by pickling it. The contract for stages: the callable a
backend returns and the one a wrapper's ``Lowering.wrap`` returns can be
pickled by :func:`dumps`. A closure stays a closure, as cheap to call as
before: the function that made it marks it with :func:`reducible`
(``return reducible(run, _wrapped, inner, plan)``), and it is stored as that
call, over plain-data plans and the inner callable(s), and made again on
load. An object with ``__call__`` pickles as usual (``__getstate__`` /
``__reduce__`` where something must be rebuilt). Where a callable cannot be
pickled, the program is simply not stored: :func:`dumps` raises
:class:`Unpicklable` naming the object, and the cache logs it at debug level.

This pickler differs from plain ``pickle`` in three ways:

* an FX ``GraphModule`` is stored node by node (op, name, target, arguments,
  the plain-data part of ``node.meta``, its constants) and rebuilt with the
  same node names, so run-time plans that hold ``torch.fx.Node`` objects
  (keyed environments) find them again. Torch's own ``GraphModule``
  pickling re-traces the generated code, which renames nodes and is several
  times slower. ``node.meta["val"]`` (fake values) and other values that
  are not plain data are not kept;
* aten operators (``OpOverload``) are stored by name;
* a tensor is stored only as a constant of a ``GraphModule``: any other
  tensor (a fake one, or a real one a plan closed over, which would be a
  stale copy after a load) makes the object unpicklable.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import pickle
from collections.abc import Callable, Iterator
from types import FunctionType
from typing import Any, Generic, TypeVar

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.node import map_aggregate

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def reducible(fn: F, rebuild: Callable[..., Any], *args: Any) -> F:
    """Mark the closure ``fn`` so that :func:`dumps` stores it as the call
    ``rebuild(*args)`` (which must make an equivalent closure; ``args``
    picklable by :func:`dumps`). Returns ``fn`` itself: calling it costs
    what it did."""
    fn.__conveyor_reduce__ = (rebuild, args)  # type: ignore[attr-defined]
    return fn


class Deferred(Generic[T]):
    """Note [Values loaded on demand]: a value that a stored program keeps
    only for a path it rarely takes (a graph to compile again if a lookup
    misses, a backward graph that only compiled autograd reads). It is
    stored as a pickle of its own, inside the entry's, and unpickled on the
    first :meth:`get`: a program loaded from the disk cache that never takes
    that path never makes the value's objects. A training step's two
    Inductor graphs and its backward graph were some 1,850 FX nodes, 0.75 of
    a warm first call's 31 profiled seconds, and objects that every later
    full collection of the garbage collector walked (the same reason as
    Note [Stage graphs loaded on demand] in ``conveyor.runtime.stored_graphs``).
    What the value shares with the rest of the entry is stored twice and
    loads as two objects, so it should be referenced only through this
    holder."""

    __slots__ = ("_payload", "_value")

    def __init__(self, value: T) -> None:
        self._value: T | None = value
        self._payload: bytes | None = None

    @property
    def loaded(self) -> bool:
        """Whether :meth:`get` would return without unpickling."""
        return self._payload is None

    def get(self) -> T:
        """The value; unpickled once."""
        if self._payload is not None:
            self._value, self._payload = loads(self._payload), None
        return self._value  # type: ignore[return-value]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_deferred, (dumps(self._value) if self._payload is None else self._payload,))


def _deferred(payload: bytes) -> Deferred[Any]:
    made: Deferred[Any] = Deferred(None)
    made._payload = payload
    return made


class Unpicklable(TypeError):
    """A compiled artifact holds an object that cannot be stored."""


def dumps(obj: Any) -> bytes:
    """``obj`` as bytes; raises :class:`Unpicklable` naming the first
    object that cannot be stored."""
    buffer = io.BytesIO()
    try:
        with _no_gc():
            _Pickler(buffer).dump(obj)
    except Unpicklable:
        raise
    except (pickle.PicklingError, TypeError, AttributeError, RuntimeError) as exc:
        raise Unpicklable(f"{type(exc).__name__}: {exc}") from exc
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """The object :func:`dumps` stored."""
    with _no_gc():
        return pickle.loads(data)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """No cyclic garbage collection while (un)pickling: the thousands of
    small objects a program's graphs make would set off full collections
    over the whole heap (fake tensors, torch's own), several times the
    (un)pickling itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._constants: set[int] = set()  # ids of tensors that are GraphModule constants

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is FunctionType:
            marked = getattr(obj, "__conveyor_reduce__", None)
            return NotImplemented if marked is None else marked
        if isinstance(obj, torch.fx.GraphModule):
            return self._graph_module(obj)
        if isinstance(obj, torch.Tensor):
            if isinstance(obj, FakeTensor) or id(obj) not in self._constants:
                raise Unpicklable(f"a {type(obj).__name__} outside a graph's constants")
            return NotImplemented
        if isinstance(obj, torch.fx.Node):
            return (_node, (obj.graph.owning_module, obj.name))
        if isinstance(obj, torch._ops.OpOverload):
            return (_op_overload, (obj.namespace, obj._schema.name.split("::", 1)[1], obj._overloadname))
        if isinstance(obj, torch._ops.OpOverloadPacket):
            return (_op_packet, (obj._qualified_op_name.split("::", 1)[0], obj.__name__))
        if isinstance(obj, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise Unpicklable(f"a symbolic value ({type(obj).__name__})")
        return NotImplemented

    def _graph_module(self, gm: torch.fx.GraphModule) -> Any:
        nodes = list(gm.graph.nodes)
        index = {n: i for i, n in enumerate(nodes)}

        def ref(a: Any) -> Any:
            """``a`` in plain containers (fx's immutable ones pickle slowly),
            each node in it a ``_Ref``."""
            if isinstance(a, torch.fx.Node):
                return _Ref(index[a])
            if isinstance(a, tuple) and type(a) is not torch.Size:
                items = [ref(v) for v in a]
                return type(a)(*items) if hasattr(a, "_fields") else tuple(items)
            if isinstance(a, list):
                return [ref(v) for v in a]
            if isinstance(a, dict):
                return {k: ref(v) for k, v in a.items()}
            if isinstance(a, slice):
                return slice(ref(a.start), ref(a.stop), ref(a.step))
            return a  # scalars, dtypes, sizes and other leaves

        table = tuple(
            (
                n.op,
                n.name,
                n.target,
                ref(n.args),
                ref(dict(n.kwargs)),
                n.type,
                {k: v for k, v in n.meta.items() if _plain(v)},
            )
            for n in nodes
        )
        attrs: dict[str, Any] = {}
        for n in nodes:
            if n.op in ("get_attr", "call_module"):
                value = _attr(gm, str(n.target))
                attrs[str(n.target)] = value
                if isinstance(value, torch.Tensor):
                    self._constants.add(id(value))
        return (_graph_module, (table, attrs, gm.graph._codegen, dict(gm.meta), type(gm).__name__))


class _Ref:
    """A reference to the node at ``index`` in a stored graph."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> Any:
        return (_Ref, (self.index,))


def _graph_module(
    table: tuple[Any, ...], attrs: dict[str, Any], codegen: Any, meta: dict[str, Any], class_name: str
) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    graph._codegen = codegen
    made: list[torch.fx.Node] = []

    def deref(a: Any) -> Any:
        return made[a.index] if isinstance(a, _Ref) else a

    for op, name, target, args, kwargs, type_, node_meta in table:
        node = graph.create_node(
            op, target, map_aggregate(args, deref), map_aggregate(kwargs, deref), name=name, type_expr=type_
        )
        node.meta.update(node_meta)
        made.append(node)
    root = torch.nn.Module()
    for target, value in attrs.items():
        _set_attr(root, target, value)
    # compiled to Python on first use: most stage graphs are only ever printed, if at all
    gm = _LazyGraphModule(root, graph, class_name=class_name)
    gm.meta.update(meta)
    return gm


def _node(gm: torch.fx.GraphModule, name: str) -> torch.fx.Node:
    return _nodes_by_name(gm)[name]


def _nodes_by_name(gm: torch.fx.GraphModule) -> dict[str, torch.fx.Node]:
    found = gm.__dict__.get("_conveyor_nodes")
    if found is None:
        found = gm.__dict__["_conveyor_nodes"] = {n.name: n for n in gm.graph.nodes}
    return found  # type: ignore[no-any-return]


def _op_overload(namespace: str, name: str, overload: str) -> Any:
    return getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")


def _op_packet(namespace: str, name: str) -> Any:
    return getattr(getattr(torch.ops, namespace), name)


_PLAIN_SCALARS = (bool, int, float, str, type(None))


def _plain(value: Any) -> bool:
    """Plain data: scalars, strings, and tuples / lists of them."""
    if isinstance(value, _PLAIN_SCALARS):
        return True
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return False


def _attr(module: torch.nn.Module, target: str) -> Any:
    return functools.reduce(getattr, target.split("."), module)


def _set_attr(root: torch.nn.Module, target: str, value: Any) -> None:
    *path, last = target.split(".")
    owner = root
    for part in path:
        if not hasattr(owner, part):
            owner.add_module(part, torch.nn.Module())
        owner = getattr(owner, part)
    if isinstance(value, torch.nn.Module):
        owner.add_module(last, value)
    else:
        setattr(owner, last, value)
