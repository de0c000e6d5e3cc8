"""Capture: a user function or module, flattened and traced to an aten FX graph.

``capture`` is the first thing ``conveyor.compile`` does on a cache miss. It
flattens the call's pytree arguments, lifts a module's parameters and buffers
to graph inputs, specializes non-tensor arguments by value, and traces with
``make_fx`` on fake tensors. The graph it returns may still contain in-place
ops and views; stages after it decide what to do with them.

``retrace`` is the helper stages use to trace a flat Python function (usually
one wrapping the graph they received, called with ``conveyor.call_graph`` so
that ``no_grad`` regions survive) into a new graph under the request's fake
mode.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from conveyor.analysis.grad_regions import detach_no_grad_results, trace_below_autograd
from conveyor.errors import DataDependentError
from conveyor.frontend import subclasses
from conveyor.frontend.aliased_returns import arguments_for_returns
from conveyor.frontend.autograd_state import refuse_inlined_functions, watching_user_code
from conveyor.frontend.closure import trace_closing_over
from conveyor.frontend.factory_dtypes import pin_factory_dtypes
from conveyor.frontend.lifted_state import lifted_state, one_per_slot
from conveyor.frontend.modes_kept import modes_kept, refuse_inference_outputs
from conveyor.frontend.objects import Installed, ObjectArgs, ObjectPlan, RecipeBuilder, is_object, read_effects
from conveyor.frontend.reachable import StateWatch, hook_dicts, refuse_changed_containers
from conveyor.frontend.stand_ins import stand_ins_of

_FLOW_HINT = (
    "conveyor.compile traces with make_fx, which cannot follow Python control flow that "
    "depends on tensor values; use torch.compile(fn, backend='conveyor') instead, which "
    "splits the program at such points"
)


@dataclass(frozen=True)
class Traced:
    """The user's program as traced: its aten graph and, when tensor
    subclasses cross its inputs or outputs, the boundary that rebuilds them
    around a graph traced over their inner tensors (Note [Tensor
    subclasses] in ``conveyor.frontend.subclasses``; ``None``: no subclass).

    :ivar graph: the flat aten graph.
    :ivar boundary: how the outer (subclass) values map to the graph's
        inner inputs and outputs, and for a training program how its
        backward is traced.
    """

    graph: torch.fx.GraphModule
    boundary: subclasses.Boundary | None = None


@dataclass(frozen=True)
class CallLayout:
    """How the user's call maps to the flat graph inputs and back.

    :ivar in_spec: pytree spec of ``(args, kwargs)``.
    :ivar tensor_positions: leaf positions that are tensors (graph inputs,
        after the lifted parameters and buffers).
    :ivar constants: the non-tensor leaves, by position (specialized).
    :ivar n_lifted: number of module parameters and buffers lifted in front.
    :ivar out_spec: pytree spec of the outputs.
    :ivar out_tensor_positions: output leaves that come from the graph.
    :ivar out_constants: non-tensor output leaves, by position.
    :ivar objects: Python objects in and out (Note [Python objects in and
        out]): argument objects' tensors are graph inputs after the call's
        own tensors; results that are objects are rebuilt, writes to argument
        objects replayed.
    """

    in_spec: pytree.TreeSpec
    tensor_positions: tuple[int, ...]
    constants: tuple[tuple[int, Any], ...]
    n_lifted: int
    out_spec: pytree.TreeSpec | None = None
    out_tensor_positions: tuple[int, ...] = ()
    out_constants: tuple[tuple[int, Any], ...] = ()
    objects: ObjectPlan | None = None

    def __post_init__(self) -> None:
        # outputs that are one tensor or a flat tuple of tensors skip pytree per call
        fast = None
        if self.out_spec is not None and not self.out_constants and self.objects is None:
            if self.out_spec.is_leaf():
                fast = "single"
            elif self.out_spec.type is tuple and all(c.is_leaf() for c in self.out_spec.children()):
                fast = "tuple"
        object.__setattr__(self, "_fast_out", fast)

    def unflatten_outputs(self, flat_outs: Sequence[Any], containers: Sequence[Any] = ()) -> Any:
        """The user's result from the graph outputs; ``containers`` are this
        call's argument objects (``ObjectArgs.containers``)."""
        fast = self._fast_out  # type: ignore[attr-defined]
        if fast == "single":
            return flat_outs[0]
        if fast == "tuple":
            return tuple(flat_outs)
        assert self.out_spec is not None
        n_objects = len(self.objects.recipes) if self.objects is not None else 0
        leaves: list[Any] = [None] * (len(self.out_tensor_positions) + len(self.out_constants) + n_objects)
        for pos, value in zip(self.out_tensor_positions, flat_outs, strict=False):
            leaves[pos] = value
        for pos, value in self.out_constants:
            leaves[pos] = value
        if self.objects is not None:
            self.objects.finish(flat_outs, containers, leaves)
        return pytree.tree_unflatten(leaves, self.out_spec)


class ModuleState:
    """A module's parameters and buffers, gathered cheaply on every call.

    Note [Module state per call]: the submodule list and the lifted tensors
    are kept between calls and read again only when one of the dicts that
    decide them changed: each module's ``__dict__`` (its training flag, and
    the dicts below themselves), ``_parameters``, ``_buffers`` and
    ``_modules``, and the forward-hook dicts (each module's and the
    process's: a hook registered or removed keys the next call again, Note
    [Forward hooks]). A change is seen by the dicts' version tags
    (``torch._C._dynamo.guards.dict_version``: CPython bumps a dict's tag on
    every write that changes it), read with one ``map`` per call, so a
    swapped parameter, a new submodule or buffer, ``m.a = None``, ``del``
    and ``train()``/``eval()`` all refresh the list, and ``version`` counts
    the refreshes. What changes a lifted tensor in place (``requires_grad_``,
    ``resize_``, ``.data =``, ``.to()`` on parameters) leaves the list as it
    is: the tensors' metadata is checked per call (Note [A guard per
    entry]). ``structure`` (the submodules and the lifted names, in the
    order of ``lifted_state``) is part of the compile-cache key, so a
    replaced submodule or a re-registered parameter that moves in the order
    compiles again rather than reusing a graph traced for the old tree.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.version = 0
        self._refresh()

    def _refresh(self) -> None:
        self.modules = tuple(m for _, m in self.module.named_modules(remove_duplicate=False))
        hooks = (*hook_dicts(None), *(d for m in self.modules for d in hook_dicts(m)))
        self._dicts = (*(d for m in self.modules for d in (m.__dict__, m._parameters, m._buffers, m._modules)), *hooks)
        self._tags = dict_tags(self._dicts)
        #: the forward hooks in force, for the compile-cache key (Note [Forward hooks]): their
        #: handles (a handle id is never reused), read again when a hook dict changed
        self.hooks = tuple(tuple(d) for d in hooks)
        names, tensors = lifted_state(self.module)
        self.structure = (self.modules, tuple(names))
        self._tensors = tuple(tensors)
        self.version += 1

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The lifted parameters and buffers, in the order of ``lifted_state``."""
        if dict_tags(self._dicts) != self._tags:
            self._refresh()
        return self._tensors

    def training(self) -> tuple[bool, ...]:
        return tuple(m.training for m in self.modules)


def _dict_tags(versions: bool = True) -> Callable[[Sequence[dict[str, Any]]], Hashable]:
    """Version tags of dicts, read with no Python loop: CPython's, where
    torch exposes them and they behave (checked here, once); else (or with
    ``versions=False``) each dict's keys and the identity of its values
    (slower, as exact for what ``ModuleState`` holds: the values it reads
    are kept alive by it, so no identity is reused)."""
    try:
        from torch._C._dynamo.guards import dict_version

        d: dict[str, Any] = {"a": 1}
        before = dict_version(d)
        d["a"] = d["a"]  # no change: the same tag
        same = dict_version(d) == before
        d["b"] = 2
        if versions and same and dict_version(d) != before:
            return lambda dicts: tuple(map(dict_version, dicts))
    except (ImportError, AttributeError, TypeError, RuntimeError):
        pass
    return lambda dicts: tuple((tuple(d), tuple(map(id, d.values()))) for d in dicts)


#: version tags of dicts (``ModuleState``, the forward hooks' key)
dict_tags = _dict_tags()


def capture(
    fn: Callable[..., Any],
    module: torch.nn.Module | None,
    state_names: Sequence[str],
    layout: CallLayout,
    fake_inputs: Sequence[Any],
    fake_mode: Any,
    objects: ObjectArgs | None = None,
) -> tuple[Traced, tuple[torch.Tensor, ...], CallLayout]:
    """Trace ``fn`` (or ``module``) into a flat aten graph.

    :param fake_inputs: fake values for the flat graph inputs: lifted state
        first, then the tensor leaves of the call, then the tensors of the
        argument ``objects``.
    :param objects: the call's argument objects, which hold fakes during the
        trace and are restored after it (Note [Python objects in and out]).
    :return: the traced program, the tensors ``fn`` closes over (graph inputs after
        ``fake_inputs``: Note [Tensors a program closes over]) and the
        layout completed with the output spec.
    """
    out_info: dict[str, Any] = {}

    n_user = len(layout.tensor_positions)
    n_leaves = n_user + len(layout.constants) + (len(objects.positions) if objects is not None else 0)

    def flat_fn(*flat: Any) -> tuple[Any, ...]:
        state = flat[: layout.n_lifted]
        user = flat[layout.n_lifted : layout.n_lifted + n_user]
        leaves: list[Any] = [None] * n_leaves
        for pos, value in zip(layout.tensor_positions, user, strict=False):
            leaves[pos] = value
        for pos, value in layout.constants:
            leaves[pos] = value
        # Note [State a program reaches]: snapshot before the objects hold fakes
        watch = StateWatch(fn, module, exclude=objects.containers if objects is not None else ())
        installed = None
        if objects is not None:
            for pos, k in zip(objects.positions, objects.roots, strict=True):
                leaves[pos] = objects.containers[k]
            installed = Installed(objects, flat[layout.n_lifted + n_user :])
        args, kwargs = pytree.tree_unflatten(leaves, layout.in_spec)
        caller_inference = torch.is_inference_mode_enabled()
        try:
            with watching_user_code() as autograd_state:  # Note [Autograd state changed by the program]
                if module is not None:
                    params = one_per_slot(module, dict(zip(state_names, state, strict=False)))
                    out = torch.func.functional_call(module, params, tuple(args), kwargs, tie_weights=False)
                else:
                    out = fn(*args, **kwargs)
            refuse_changed_containers(args, kwargs, leaves, layout.in_spec)
            flat_out = _flat_outputs(out, installed, out_info)
            autograd_state.refuse_outputs_needing_sources(flat_out)
            refuse_inference_outputs(flat_out, flat, caller_inference)  # Note [Outputs made in another inference mode]
            refuse_inlined_functions(flat_out)  # Note [Functions applied past the capture]
            return flat_out
        finally:
            if installed is not None:
                installed.restore()
            changed = watch.restore()
            if changed:
                raise watch.refuse(changed)

    traced, closure = trace_closing_over(lambda f, inputs: trace_user(f, inputs, fake_mode), flat_fn, fake_inputs, fake_mode)
    return traced, closure, CallLayout(
        layout.in_spec,
        layout.tensor_positions,
        layout.constants,
        layout.n_lifted,
        out_info["spec"],
        out_info["tensors"],
        out_info["constants"],
        out_info["objects"],
    )


def _int_size(v: Any) -> bool:
    return type(v) is torch.Size and all(type(d) is int for d in v)


def _flat_outputs(out: Any, installed: Installed | None, out_info: dict[str, Any]) -> tuple[Any, ...]:
    """The graph outputs of the user's result: its tensor leaves, then the
    tensors of its object leaves and of the writes to argument objects."""
    # a torch.Size of ints is one constant leaf: pytree would rebuild it as a plain tuple
    out_leaves, out_spec = pytree.tree_flatten(out, is_leaf=_int_size)
    builder = RecipeBuilder(installed.objects.containers if installed is not None else ())
    recipes = tuple(
        (i, builder.describe(v, f"result leaf {i} ({type(v).__qualname__})"))
        for i, v in enumerate(out_leaves)
        if not isinstance(v, torch.Tensor) and (is_object(v) or id(v) in builder.index)
    )
    in_recipes = {i for i, _ in recipes}
    constants = tuple(
        (i, builder.describe(v, f"result leaf {i}").value)  # type: ignore[union-attr]
        for i, v in enumerate(out_leaves)
        if not isinstance(v, torch.Tensor) and i not in in_recipes
    )
    effects = read_effects(installed, builder) if installed is not None else ()
    plain = tuple(v for v in out_leaves if isinstance(v, torch.Tensor))
    out_info["spec"] = out_spec
    out_info["tensors"] = tuple(i for i, v in enumerate(out_leaves) if isinstance(v, torch.Tensor))
    out_info["constants"] = constants
    out_info["objects"] = ObjectPlan(len(plain), recipes, effects) if recipes or effects else None
    return (*plain, *builder.tensors)


def trace_user(fn: Callable[..., Any], fake_inputs: Sequence[Any], fake_mode: Any) -> Traced:
    """Trace the user's flat program, keeping its ``no_grad`` regions
    (see ``conveyor.analysis.grad_regions``); tensor subclass inputs and outputs are
    traced as their inner tensors, and the result carries their boundary
    (Note [Tensor subclasses])."""
    from torch._dynamo import compiled_autograd

    default = torch.get_default_dtype()
    # Note [Joint trace under compiled autograd] (autograd stage): a program running
    # autograd.grad or .backward() itself, traced inside a compiled-autograd region, had
    # that backward captured by compiled autograd, which kept the trace's fakes in its graph
    with modes_kept(), compiled_autograd._disable():  # Note [A program that leaves grad mode changed]
        traced = _trace_user(fn, fake_inputs, fake_mode)
    pin_factory_dtypes(traced.graph, default)  # Note [Factory calls under a default dtype the program set]
    return traced


def _trace_user(fn: Callable[..., Any], fake_inputs: Sequence[Any], fake_mode: Any) -> Traced:
    desugared = subclasses.desugar(fn, fake_inputs)
    if desugared is None:
        made_subclass: list[bool] = []
        graph = retrace(subclasses.returns_subclass(fn, made_subclass), fake_inputs, fake_mode)
        graph = arguments_for_returns(graph)  # Note [Custom ops that return what they mutate]
        if not any(made_subclass):
            return Traced(detach_no_grad_results(graph, tuple(fake_inputs)))
        desugared = subclasses.desugar(fn, fake_inputs, outputs_only=True)  # Note [Subclasses the program makes]
    assert desugared is not None
    inner_fn, inner_fakes, boundary = desugared
    graph = arguments_for_returns(retrace(inner_fn, inner_fakes, fake_mode))
    graph = detach_no_grad_results(graph, tuple(inner_fakes))
    return Traced(graph, subclasses.checked(graph, boundary()))


def retrace(
    fn: Callable[..., Any],
    fake_inputs: Sequence[Any],
    fake_mode: Any,
    *,
    pre_dispatch: bool = False,
    decomposition_table: dict[Any, Callable[..., Any]] | None = None,
) -> torch.fx.GraphModule:
    """Trace a flat function into an aten graph under ``fake_mode``.

    ``fn`` takes the flat inputs and returns a tuple of outputs. The trace
    runs on stand-ins for the fake inputs, which it leaves untouched
    (Note [Tracing on stand-ins] in ``conveyor.frontend.stand_ins``). Tracing errors caused by data-dependent
    control flow become a :class:`DataDependentError` that says so.
    """

    try:
        with fake_mode:
            stand_ins = stand_ins_of(fake_inputs, fake_mode)
            # every node learns the grad mode it ran under; every gradient cut is checked
            traced = trace_below_autograd(fn, decomposition_table=decomposition_table, pre_dispatch=pre_dispatch)
            return traced(*stand_ins)
    except Exception as exc:
        if _is_data_dependent(exc):
            raise DataDependentError(f"capture: {type(exc).__name__}: {exc}\n{_FLOW_HINT}") from exc
        raise


def _is_data_dependent(exc: BaseException) -> bool:
    names = {type(e).__name__ for e in _chain(exc)}
    text = " ".join(str(e) for e in _chain(exc))
    return bool(
        names & {"DataDependentOutputException", "GuardOnDataDependentSymNode", "DynamicOutputShapeException"}
        or "data-dependent" in text
        or "data dependent" in text
        or "aten._local_scalar_dense" in text
        or ".item()" in text
        or "data is not allocated" in text  # a fake tensor's values were asked for
    )


def _chain(exc: BaseException | None) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out
