"""Capturing a backward with torch's compiled-autograd engine: ``ConveyorCapture``.

torch 2.13's engine (``torch._C._dynamo.compiled_autograd``) walks the
autograd graph of each ``.backward()`` / ``torch.autograd.grad`` and asks a
*compiler instance* to trace every node into one FX graph. We install our own
subclass of ``AutogradCompilerInstance`` (no dynamo involved). It differs
from torch's in one method, ``proxy_call_backward``, which torch calls for
every Python ``autograd.Function`` node:

Note [Inlined backward] (the reader's side; the writer's is in
``conveyor_autograd/runtime.py``): a node whose Function class carries
a ``BackwardGraph`` (``conveyor_autograd.backward_graph_of``: the program's
aten backward graph and its layout) is not called opaquely. Its graph is copied into the
capture, node by node: its placeholders are bound to the proxies of the
saved tensors, of the saved symbols (lifted by the engine as sizes through
``_compiled_autograd_key``, so they are symbols in the capture) and of the
incoming gradients (made contiguous, as the stage's run time does), and its
outputs become the node's gradients. This is PyTorch's own treatment of
AOTAutograd backwards (pytorch/pytorch PR 143405) for conveyor's graphs.
Any other Function (a user's, a foreign library's) stays an opaque
``call_backward`` that runs its Python backward at run time.

The engine's internals are private and changed within the last year, so the
copy is gated by :func:`inline_supported`, a probe of the installed torch;
when it fails, every Function stays opaque (correct, just not fused) and a
warning says so once.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from conveyor_autograd import backward_graph_of, function_grads
from torch._dynamo import compiled_autograd as ca
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

from conveyor_compiled_autograd.recheck import getter

_PROBE_PARAMS = ("inputs", "output_metadatas", "saved_tensors", "backward_idx", "ctx")
_warned: list[str] = []


def probe() -> str | None:
    """Why conveyor's backward graphs cannot be inlined with the installed
    torch, or ``None`` when they can."""
    inst = getattr(ca, "AutogradCompilerInstance", None)
    if inst is None:
        return "torch._dynamo.compiled_autograd has no AutogradCompilerInstance"
    for name in ("proxy_call_backward", "to_proxy", "bind_objects_to_proxies"):
        if not callable(getattr(inst, name, None)):
            return f"AutogradCompilerInstance has no {name}()"
    params = tuple(inspect.signature(inst.proxy_call_backward).parameters)[1:]
    if params[: len(_PROBE_PARAMS)] != _PROBE_PARAMS:
        return f"AutogradCompilerInstance.proxy_call_backward{params} has changed"
    if not hasattr(torch._C._FunctionBase, "_get_compiled_autograd_symints"):
        return "autograd nodes have no _get_compiled_autograd_symints()"
    return None


def inline_supported() -> bool:
    """Whether to inline (see :func:`probe`); warns once when not."""
    reason = probe()
    if reason is not None and not _warned:
        _warned.append(reason)
        warnings.warn(
            f"conveyor compiled_autograd: conveyor's backward graphs are called opaquely, not inlined: {reason}",
            RuntimeWarning,
            stacklevel=3,
        )
    return reason is None


class ConveyorCapture(ca.AutogradCompilerInstance):
    """torch's compiler instance, with conveyor's backward graphs inlined.

    :param compile_capture: called once per capture with the captured graph
        and what this instance saw (``inlined`` count, opaque Function names);
        returns the run-time callable.
    :param inline: copy conveyor's backward graphs in (Note [Inlined backward]).
    """

    def __init__(self, compile_capture: Callable[..., Any], inline: bool) -> None:
        super().__init__(self._compile)
        self._compile_capture = compile_capture
        self._inline = inline
        self.inlined = 0
        self.functions: list[str] = []
        self._used_sizes: tuple[int, ...] | None = None

    def _compile(self, gm: torch.fx.GraphModule) -> Any:
        return self._compile_capture(gm, self.inlined, tuple(self.functions))

    def remove_unused_sizes(self) -> Any:
        used = super().remove_unused_sizes()
        self._used_sizes = tuple(sorted(used)) if isinstance(used, set) else None
        return used

    def end_capture(self, outputs: Any) -> Any:
        """torch's ``end_capture``, with a lighter run-time wrapper where it
        can be (Note [Sizes as ints])."""
        self._used_sizes = None
        wrapper, compiled = super().end_capture(outputs)
        used = self._used_sizes
        if used is None or getattr(self, "nan_checker", None) or _cudagraph_snapshots():
            return wrapper, compiled
        return functools.partial(_runtime_wrapper, getter(used)), compiled

    def proxy_call_backward(
        self,
        inputs: Sequence[Any],
        output_metadatas: Sequence[Any],
        saved_tensors: Sequence[torch.Tensor],
        backward_idx: int,
        ctx: Any,
        *rest: Any,
    ) -> tuple[torch.Tensor | None, ...]:
        info = backward_graph_of(ctx._forward_cls) if self._inline else None
        if info is None or any(inputs[k] is None for k in info.layout.diff_outputs):
            self.functions.append(_function_name(ctx))
            return super().proxy_call_backward(inputs, output_metadatas, saved_tensors, backward_idx, ctx, *rest)
        symbols = ctx._get_compiled_autograd_symints()
        if len(symbols) != info.layout.num_saved_symbols or len(saved_tensors) != info.layout.num_saved_tensors:
            self.functions.append(_function_name(ctx))
            return super().proxy_call_backward(inputs, output_metadatas, saved_tensors, backward_idx, ctx, *rest)
        grads = self.to_proxy(list(inputs))
        graph = self.fx_tracer.graph
        tangents = [graph.call_function(torch.ops.aten.contiguous.default, (grads[k].node,)) for k in info.layout.diff_outputs]
        args = [*(_node(p) for p in self.to_proxy(list(saved_tensors))), *(_node(self.to_proxy(s)) for s in symbols), *tangents]
        outs = _copy_in(info.graph, args, graph, self.fx_tracer.root)
        proxies = [torch.fx.Proxy(o, self.fx_tracer) if isinstance(o, torch.fx.Node) else o for o in outs]
        grads_in = function_grads(info.layout.input_grads(proxies))
        self.inlined += 1
        with disable_proxy_modes_tracing():  # fake gradients bound to the copied outputs, as torch's own does
            fakes: list[torch.Tensor | None] = []
            for meta, proxy in zip(output_metadatas, grads_in, strict=False):
                if meta is None or proxy is None:
                    fakes.append(None)
                    continue
                layout, device, dtype, size = meta
                fakes.append(torch.empty(size=size, dtype=dtype, layout=layout, device=device))
            bound = [(f, p) for f, p in zip(fakes, grads_in, strict=False) if f is not None]
            self.bind_objects_to_proxies([f for f, _ in bound], [p for _, p in bound])
        return tuple(fakes)


#: Note [Sizes as ints]: torch's run-time wrapper passes each used size as
#: ``torch.empty(0, n)`` marked dynamic (for dynamo, which conveyor does not
#: run): two Python calls and a tensor per size on every backward (about 0.4
#: ms for a two-block transformer's 106 sizes). Conveyor's run time reads a size
#: as an int either way (``unwrap_maybe_dynamic_int`` passes ints through), so
#: its wrapper passes the used sizes as they are, and otherwise does what
#: torch's does: the compiled-region flag, and the engine's capture disabled
#: while the captured backward runs. The NaN checker and the CUDA-graph
#: snapshot mode keep torch's wrapper.
def _runtime_wrapper(used: Callable[[Sequence[Any]], Sequence[Any]], compiled_fn: Callable[..., Any], inputs: Any, sizes: Any, scalars: Any, hooks: Any, packed: Any) -> Any:
    ca.in_compiled_autograd_region = True
    try:
        with ca._disable():
            return compiled_fn(inputs, used(sizes), scalars, hooks, packed)
    finally:
        ca.in_compiled_autograd_region = False


def _cudagraph_snapshots() -> bool:
    enabled = getattr(ca, "snapshot_cudagraph_enabled", None)
    return bool(enabled()) if callable(enabled) else False


def _node(value: Any) -> Any:
    return value.node if isinstance(value, torch.fx.Proxy) else value


def _function_name(ctx: Any) -> str:
    cls = ctx._forward_cls
    return f"call_backward({cls.__module__}.{cls.__qualname__})"


def _copy_in(
    source: torch.fx.GraphModule, args: Sequence[torch.fx.Node], graph: torch.fx.Graph, root: torch.nn.Module
) -> list[Any]:
    """Copy ``source``'s nodes into ``graph`` with its placeholders bound to
    ``args``; the values of its outputs. ``aten.view`` becomes ``reshape``
    (the capture's tensors need not have the strides the backward graph was
    traced with); constants (``get_attr``) are registered on ``root``."""
    env: dict[torch.fx.Node, Any] = {}
    it = iter(args)
    result: list[Any] = []
    for node in source.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(it)
        elif node.op == "output":
            result = list(torch.fx.node.map_arg(node.args[0], env.__getitem__))
        elif node.op == "get_attr":
            value = _attr(source, str(node.target))
            name = f"_conveyor_const_{id(source)}_{str(node.target).replace('.', '_')}"
            if not hasattr(root, name):
                setattr(root, name, value)
            env[node] = graph.get_attr(name)
        elif node.op == "call_function":
            copied = graph.node_copy(node, env.__getitem__)
            if copied.target is torch.ops.aten.view.default:
                copied.target = torch.ops.aten.reshape.default
            env[node] = copied
        else:
            raise NotImplementedError(f"conveyor compiled_autograd: cannot inline a {node.op} node of a backward graph")
    return result


def _attr(module: torch.nn.Module, target: str) -> Any:
    obj: Any = module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
