"""Note [Direct op calls]: a graph's generated code calls each op as
``torch.ops.aten.addmm.default(...)``: four attribute lookups and the Python
frame of ``OpOverload.__call__``, whose only work is to call the C++
operator ``OpOverload._op``. On a graph of a hundred small ops that frame is
a seventh of the run time (12 residual blocks under ``no_grad``: 438 µs
through ``OpOverload``, 381 µs calling ``_op``; eager runs the module in
455 µs). :func:`direct_forward` runs FX's own generated code for the graph
with one change: the ``torch`` its code names is a namespace in which every
op of the graph resolves straight to its ``_op``; any other name (dtypes,
``torch.ops.higher_order``, helpers) is looked up on ``torch`` itself, once,
and kept. What runs is the same operator with the same arguments, dispatched
by the same C++ dispatcher: modes, subclasses and autograd see the same calls.

Note [Torch-level calls]: ``_op`` is a boxed call: pybind parses its
arguments against the schema into a stack of IValues. For the ops a backward
graph is made of (views, ``mm``, ``clone``, ``sum``, ``add``, ...) the
torch-level binding (``torch.mm``, ``Tensor.view``) reaches the same
operator through the generated C++ argument parser and an unboxed call,
about a microsecond less per call (a two-block transformer's captured
backward, 190 ops: 1.90 -> 1.81 ms). :data:`_TORCH_LEVEL` lists the
overloads whose binding dispatches exactly that overload for the argument
forms it allows (positional arguments up to a count, the keyword arguments
named); a graph in which every call is an ``OpOverload`` or ``getitem``
calls them so, under ``torch._C.DisableTorchFunction`` (the bindings would
otherwise offer the call to ``__torch_function__`` overrides and modes,
which an ``_op`` call never reaches). Dispatch modes, subclasses'
``__torch_dispatch__`` and autograd see the same calls as before (tested
for each entry).

Note [Inputs freed at their last use]: the graph's code drops each value
(``x = None``) after its last reader, but ``forward(gm, *args)`` keeps every
input alive until the call returns: the caller's list holds them. The
compiled callable offers the same code taking its list, ``run.boxed()``
(made on first request: a second compile of the code that only its users
pay), which unpacks the list and clears it (the flat calling convention
lets a callee clear its list), so an input the caller no longer holds is
freed at its last reader and its memory is reused by the ops after it, as
eager's engine frees saved tensors node by node. The same operators run on
the same arguments; only when a reference is dropped changes.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import operator
import re
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx


class _Proxy(types.SimpleNamespace):
    """An attribute namespace: the names set on it, and any other looked up on
    ``real`` the first time and kept."""

    def __init__(self, real: Any, /, **names: Any) -> None:
        super().__init__(**names)
        object.__setattr__(self, "__conveyor_real__", real)  # no op or overload has a dunder name

    def __getattr__(self, name: str) -> Any:
        value = getattr(object.__getattribute__(self, "__conveyor_real__"), name)
        setattr(self, name, value)
        return value


@functools.cache
def _torch_level() -> dict[Any, tuple[Callable[..., Any], int, frozenset[str]]]:
    """Note [Torch-level calls]: overload -> (binding, most positional
    arguments, keyword arguments allowed)."""
    aten = torch.ops.aten
    none: frozenset[str] = frozenset()
    return {
        aten.view.default: (torch.Tensor.view, 2, none),
        aten.expand.default: (torch.Tensor.expand, 2, none),
        aten.t.default: (torch.t, 1, none),
        aten.transpose.int: (torch.transpose, 3, none),
        aten.permute.default: (torch.permute, 2, none),
        aten.select.int: (torch.select, 3, none),
        aten.unsqueeze.default: (torch.unsqueeze, 2, none),
        aten.squeeze.dim: (torch.squeeze, 2, none),
        aten.mm.default: (torch.mm, 2, none),
        aten.bmm.default: (torch.bmm, 2, none),
        aten.clone.default: (torch.clone, 1, frozenset({"memory_format"})),
        aten.sum.dim_IntList: (torch.sum, 3, frozenset({"dtype"})),
        aten.add.Tensor: (torch.add, 2, frozenset({"alpha"})),
        aten.sub.Tensor: (torch.sub, 2, frozenset({"alpha"})),
        aten.mul.Tensor: (torch.mul, 2, none),
        aten.stack.default: (torch.stack, 2, none),
        aten.cat.default: (torch.cat, 2, none),
        aten.as_strided.default: (torch.as_strided, 4, none),
        aten.linear.default: (torch._C._nn.linear, 3, none),
        aten.addmm.default: (torch.addmm, 3, frozenset({"beta", "alpha"})),
        aten.native_layer_norm.default: (torch.native_layer_norm, 5, none),
        aten.gelu.default: (torch._C._nn.gelu, 1, frozenset({"approximate"})),
        aten._log_softmax_backward_data.default: (torch._log_softmax_backward_data, 4, none),
    }


_PLAIN_CALLS = frozenset({operator.getitem})
_MOVEMENT = "conveyor.protocol.backends.movement"


def torch_level_calls(graph: torch.fx.Graph) -> dict[Any, Callable[..., Any]]:
    """The overloads of ``graph`` to call through their torch-level binding
    (Note [Torch-level calls]); empty when some call is not an
    ``OpOverload`` or ``getitem``."""
    table = _torch_level()
    found: dict[Any, Callable[..., Any]] = {}
    refused: set[Any] = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if type(target) is not torch._ops.OpOverload:
            if target in _PLAIN_CALLS or getattr(target, "__module__", None) == _MOVEMENT:
                continue  # a collapsed chain (Note [Movement chains]) calls ops on plain values only
            return {}
        entry = table.get(target)
        if entry is None or target in refused:
            continue
        binding, positional, keywords = entry
        if len(node.args) > positional or not keywords.issuperset(node.kwargs):
            refused.add(target)
            found.pop(target, None)
        else:
            found[target] = binding
    return found


def _namespace(graph: torch.fx.Graph, bindings: dict[Any, Callable[..., Any]]) -> _Proxy:
    """``torch`` for the graph's code, with ``torch.ops.<ns>.<op>.<overload>``
    bound to the C++ operators (or to the torch-level ``bindings``)."""
    packets: dict[tuple[str, str], dict[str, Any]] = {}
    for node in graph.nodes:
        target = node.target
        if node.op == "call_function" and type(target) is torch._ops.OpOverload:
            call = bindings.get(target, target._op)
            packets.setdefault((target.namespace, target._opname), {})[target._overloadname] = call
    namespaces: dict[str, dict[str, Any]] = {}
    for (ns, name), overloads in packets.items():
        namespaces.setdefault(ns, {})[name] = _Proxy(getattr(getattr(torch.ops, ns), name), **overloads)
    ops = _Proxy(torch.ops, **{ns: _Proxy(getattr(torch.ops, ns), **names) for ns, names in namespaces.items()})
    return _Proxy(torch, ops=ops)


#: a call site of FX's generated code: ``torch.ops.<namespace>.<op>.<overload>(``
_CALL_SITE = re.compile(r"\btorch\.ops\.([A-Za-z_]\w*)\.([A-Za-z_]\w*)\.([A-Za-z_]\w*)\(")


def _named_calls(source: str, names: dict[str, Any]) -> Callable[..., Any] | None:
    """Note [Calls by name]: ``torch.ops.aten.mm.default(...)`` in the
    graph's code is four attribute lookups on the namespace of
    :func:`_namespace` before the call (about 0.25 µs; a tenth of a view's
    whole call). The graph's code is compiled once more with each call
    site naming its callable directly, a global bound to exactly what the
    four lookups give (the same operator or binding, so the same call);
    an op passed as an argument (a movement chain's steps) is left as it
    is. ``None`` where the code does not compile so."""
    namespace = names["torch"]
    bound: dict[str, Any] = {}

    def name(match: re.Match[str]) -> str:
        ns, op, overload = match.groups()
        key = f"_conveyor_call_{ns}_{op}_{overload}"
        if key not in bound:
            bound[key] = getattr(getattr(getattr(namespace.ops, ns), op), overload)
        return f"{key}("

    try:
        rewritten = _CALL_SITE.sub(name, source)
        if any(k in names for k in bound):
            return None
        scope = {**names, **bound}
        filename = f"<conveyor eager backend {next(_sources)}>"
        linecache.cache[filename] = (len(rewritten), None, rewritten.splitlines(True), filename)  # tracebacks show the line
        exec(compile(rewritten, filename, "exec"), scope)  # noqa: S102 (FX's own generated code, renamed)
    except (AttributeError, SyntaxError):
        return None
    forward = scope.get("forward")
    return forward if isinstance(forward, types.FunctionType) else None


_sources = itertools.count()


def direct_forward(gm: torch.fx.GraphModule) -> Callable[[list[Any]], Sequence[Any]]:
    """A callable taking the graph's flat inputs as one list and returning its
    outputs, running ``gm``'s generated code with direct op calls (Note [Direct
    op calls])."""
    code = _code_of(gm)
    if code is None or "torch" not in code[1]:
        return lambda args: gm.forward(*args)  # type: ignore[no-any-return]
    source, fx_globals = code
    names = dict(fx_globals)
    bindings = torch_level_calls(gm.graph)
    names["torch"] = _namespace(gm.graph, bindings)
    forward = _named_calls(source, names) or _fx_forward(gm, names)
    made: list[Callable[[list[Any]], Sequence[Any]] | None] = []

    def boxed() -> Callable[[list[Any]], Sequence[Any]] | None:
        """Note [Inputs freed at their last use]: the call that clears its
        list, or ``None`` where the code's signature is not plain."""
        if not made:
            taking = _taking_list(source, names)
            made.append(None if taking is None else _calling(gm, taking, bool(bindings), boxed=True))
        return made[0]

    run = _calling(gm, forward, bool(bindings), boxed=False)
    run.boxed = boxed  # type: ignore[attr-defined]
    return run


def _code_of(gm: torch.fx.GraphModule) -> tuple[str, dict[str, Any]] | None:
    """FX's source of ``gm``'s forward and the globals it runs in; ``None``
    where its forward is not FX's generated code.

    Note [Code generated, compiled once]: a lazy graph module that has not
    generated its code yet (the eager backend's rewritten graph: Note
    [Rewritten graphs generate code once]) is asked for the source only,
    ``Graph.python_code`` as its own recompile would call it, and not for
    its compiled ``forward``: the source is compiled once, with its call
    sites named (Note [Calls by name]; about 7 ms on MobileNetV2's forward).
    The module keeps its lazy ``forward``, generated if something calls it
    (the code FX compiles differs only in its file name, ``_co_fields``). A
    graph with another code generator (pytree's, whose code reads what
    recompile sets on the module) or with profiler metadata switched on
    compiles as FX does."""
    if _needs_recompile(gm):
        if type(gm.graph._codegen) is torch.fx.graph.CodeGen and not _profiler_metadata():
            python_code = gm.graph.python_code(root_module="self")
            return python_code.src, python_code.globals
        gm.real_recompile()  # type: ignore[operator]
    code = type(gm).forward
    if not isinstance(code, types.FunctionType):
        return None
    return gm.code, code.__globals__


def _needs_recompile(gm: torch.fx.GraphModule) -> bool:
    """A lazy graph module that has not generated its code yet."""
    return bool(getattr(gm, "_needs_recompile", lambda: False)())


def _profiler_metadata() -> bool:
    """FX's recompile records profiler metadata (torch's experimental FX config; off by default)."""
    config = getattr(torch.fx.experimental, "_config", None)
    return bool(getattr(config, "enrich_profiler_metadata", False))


def _fx_forward(gm: torch.fx.GraphModule, names: dict[str, Any]) -> Callable[..., Any]:
    """FX's compiled ``forward`` of ``gm`` over the globals ``names``."""
    if _needs_recompile(gm):
        gm.real_recompile()  # type: ignore[operator]
    code = type(gm).forward
    return types.FunctionType(code.__code__, names, code.__name__, code.__defaults__, code.__closure__)


def _calling(gm: torch.fx.GraphModule, forward: Callable[..., Any], bound: bool, boxed: bool) -> Callable[[list[Any]], Sequence[Any]]:
    """``args -> outputs`` calling ``forward`` with the graph's inputs
    spread (``boxed``: with the list itself), under ``DisableTorchFunction``
    where ``bound`` (Note [Torch-level calls])."""
    if bound:
        no_torch_function = torch._C.DisableTorchFunction
        if boxed:

            def run_bound_boxed(args: list[Any]) -> Sequence[Any]:
                with no_torch_function():
                    return forward(gm, args)  # type: ignore[no-any-return]

            return run_bound_boxed

        def run_bound(args: list[Any]) -> Sequence[Any]:
            with no_torch_function():  # Note [Torch-level calls]
                return forward(gm, *args)  # type: ignore[no-any-return]

        return run_bound
    if boxed:

        def run_boxed(args: list[Any]) -> Sequence[Any]:
            return forward(gm, args)  # type: ignore[no-any-return]

        return run_boxed

    def run(args: list[Any]) -> Sequence[Any]:
        return forward(gm, *args)  # type: ignore[no-any-return]

    return run


#: FX's signature line: ``def forward(self, a, b, ...)`` with plain names (and a return annotation)
_SIGNATURE = re.compile(r"^def forward\(self((?:, [A-Za-z_]\w*)+)\)((?: -> [^\n]*)?):\n", re.MULTILINE)


def _taking_list(source: str, names: dict[str, Any]) -> Callable[..., Any] | None:
    """The graph's code taking its inputs as one list that it clears
    (Note [Inputs freed at their last use]), with the call sites of
    Note [Calls by name]; ``None`` where the signature is not FX's plain
    one (a pytree or other code generator) or the code does not compile."""
    found = list(_SIGNATURE.finditer(source))
    if len(found) != 1:
        return None
    params = found[0].group(1)[2:]
    head = f"def forward(self, _conveyor_args){found[0].group(2)}:\n    {params}, = _conveyor_args\n    _conveyor_args.clear()\n"
    taking = source[: found[0].start()] + head + source[found[0].end() :]
    return _named_calls(taking, dict(names))
