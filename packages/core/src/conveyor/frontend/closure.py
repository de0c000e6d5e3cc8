"""Tensors a program closes over.

Note [Tensors a program closes over]: a function may use tensors it does not
take as arguments: a global, a closure cell, a plain tensor attribute of a
module. Left to ``make_fx`` they would become constants of the graph (and a
one-element one would even be computed with, and written to, at trace time):
no gradient would reach them, writes to them would be lost, later changes
would not be seen. So capture finds them in a first trace, then traces again
with each one as a graph input after the flat arguments, and every call
passes the same tensor objects: their current values, writes back into them,
and gradients into them, as in eager. (Rebinding the name to another tensor
is not seen: compile again.)

Note [Tensors a program makes]: a tensor the program makes without the
dispatcher (a legacy constructor, ``torch.LongTensor([294])``) is real, as a
closed-over one is, and the first trace cannot tell the two apart. The
second trace can: a real tensor it meets that is not one of the lifted ones
was made by this run of the program, so it becomes a constant of the graph
(``lift_fresh``, as ``torch.tensor([...])`` does), and a lifted tensor the
second trace never met was such a tensor of the first trace: the program is
traced once more without it. No fake of a real tensor is ever left in a
graph as a constant.

Note [Parameters a program makes]: ``nn.Parameter(self.w)`` of a tensor the
program closes over (a module rebinding its weight in ``forward``) is made
without the dispatcher, so it is real in both traces, and a new object in the
second. As a constant of the graph it would be wrong twice: one requiring grad
is a leaf the program makes (Note [Leaves the program makes]), and it shares
``self.w``'s storage, whose later in-place changes a constant would not see.
Dynamo makes it outside its graphs from the tensor it reads as an input, so
the program compiles through dynamo. Before, the second trace failed with the
fake mode's "Please convert all Tensors to FakeTensors first" (it lifts only
plain tensors; test_cpu_repro.py's ``test_nn_param_assign``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode

from conveyor.errors import DynamoSplits

T = TypeVar("T")
#: traces a flat function on fake inputs; what it returns (a graph, or the
#: graph with what the trace learned beside it) is handed back as it is
Trace = Callable[[Callable[..., Any], Sequence[Any]], T]


class _RealTensors(TorchFunctionMode):
    """Replaces the real tensors reaching torch functions: by their stand-ins
    when known (``swaps``: id -> stand-in), otherwise by a fake of their own,
    recording them in ``found`` (nothing real is ever computed with)."""

    def __init__(self, fake_mode: Any, swaps: dict[int, torch.Tensor], made_here: bool = False) -> None:
        super().__init__()
        self.fake_mode = fake_mode
        self.swaps = swaps
        self.made_here = made_here
        self.found: dict[int, torch.Tensor] = {}
        self.used: set[int] = set()

    def _swap(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, FakeTensor) or type(t) not in (torch.Tensor, torch.nn.Parameter):
            return t  # fakes, and the tracer's own wrappers
        if torch._C._functorch.is_functorch_wrapped_tensor(t):
            return t  # functorch's (a vmap BatchedTensor of a body traced under vmap: associative_scan's)
        if id(t) in self.swaps:
            self.used.add(id(t))
            return self.swaps[id(t)]
        self.found.setdefault(id(t), t)
        if self.made_here:  # Note [Tensors a program makes]: a constant of the graph
            if t.requires_grad or type(t) is not torch.Tensor:  # Note [Parameters a program makes]
                raise DynamoSplits(
                    "it makes an nn.Parameter of a tensor it closes over (Note [Parameters a program makes])"
                )
            return torch.ops.aten.lift_fresh.default(t)  # type: ignore[no-any-return]
        return self.fake_mode.from_tensor(t, static_shapes=True)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        outside = _OUTSIDE_A_GRAPH.get(func)
        if outside is not None:  # Note [Calls only dynamo can trace]
            raise DynamoSplits(f"it {outside} (Note [Calls only dynamo can trace])")
        kwargs = kwargs or {}
        if _no_real_tensor(args) and (not kwargs or _no_real_tensor(kwargs.values())):
            return func(*args, **kwargs)  # Note [Calls with nothing to swap]
        # a torch.Size stays one: pytree would rebuild it as a tuple, which
        # ``x.new(size)`` reads as data (a 1-d tensor of the sizes)
        args, kwargs = pytree.tree_map_only(torch.Tensor, self._swap, (args, kwargs), is_leaf=_is_size)
        return func(*args, **kwargs)


# Note [Calls with nothing to swap]: the mode sees every torch function the
# program calls during a capture (257 on MobileNetV2's forward behind
# dynamo), and rebuilding a call's arguments with pytree to swap real
# tensors costs about 20 us each, where nearly every call holds only fakes,
# numbers and shapes. A call whose arguments are all such values, or flat
# lists and tuples of them, holds nothing ``_swap`` would change, so it is
# made with the arguments as they are (as eager makes it); any other value
# (a real tensor, a dict, an object) takes pytree's path.
_NOTHING_TO_SWAP = frozenset(
    {
        FakeTensor, int, float, bool, complex, str, type(None), type(...), torch.Size, torch.dtype, torch.device,
        torch.layout, torch.memory_format, torch.SymInt, torch.SymFloat, torch.SymBool,
    }
)


def _no_real_tensor(values: Any) -> bool:
    """No value of ``values`` is, or (in a list or tuple) holds, a tensor
    ``_RealTensors._swap`` would swap (Note [Calls with nothing to swap])."""
    for v in values:
        kind = type(v)
        if kind in _NOTHING_TO_SWAP:
            continue
        if (kind is tuple or kind is list) and all(type(x) in _NOTHING_TO_SWAP for x in v):
            continue
        return False
    return True


# Note [Calls only dynamo can trace]: a capture runs the program on fake
# tensors, which hold no data to hand NumPy (``x.numpy()`` raises "not
# supported for tensor subclasses") and which a deep copy cannot copy into
# the capture's own fake mode (``copy.deepcopy(self.linear)`` in a forward:
# "Mixing fake modes"). Dynamo runs such a call in Python, between graphs (or
# traces NumPy itself), so ``conveyor.compile`` compiles such a program
# through dynamo (Note [Programs only dynamo can split]).
_OUTSIDE_A_GRAPH = {
    torch.Tensor.numpy: "reads a tensor's data with .numpy()",
    torch.Tensor.__deepcopy__: "deep-copies a tensor (copy.deepcopy of a tensor or a module)",
}


def _is_size(value: Any) -> bool:
    return isinstance(value, torch.Size)


def trace_closing_over(
    trace: Trace[T], fn: Callable[..., Any], fake_inputs: Sequence[Any], fake_mode: Any
) -> tuple[T, tuple[torch.Tensor, ...]]:
    """``trace(fn, fake_inputs)``, with the tensors ``fn`` closes over lifted
    to inputs after ``fake_inputs``; returns the trace's result and those tensors."""
    finder = _RealTensors(fake_mode, {})

    def finding(*flat: Any) -> Any:
        with finder:
            return fn(*flat)

    try:
        graph = trace(finding, fake_inputs)
    except Exception:
        if not finder.found:
            raise
    if not finder.found:
        return graph, ()
    closure = tuple(finder.found.values())
    while True:
        graph, used = _trace_lifted(trace, fn, fake_inputs, fake_mode, closure)
        if all(id(t) in used for t in closure):
            return graph, closure
        # some were made by the first trace's run (Note [Tensors a program makes])
        closure = tuple(t for t in closure if id(t) in used)


def _trace_lifted(
    trace: Trace[T], fn: Callable[..., Any], fake_inputs: Sequence[Any], fake_mode: Any, closure: tuple[torch.Tensor, ...]
) -> tuple[T, set[int]]:
    """The trace with ``closure`` as inputs after ``fake_inputs``, and the ids
    of the closure tensors the program met."""
    n = len(fake_inputs)
    lifters: list[_RealTensors] = []

    def lifted(*flat: Any) -> Any:
        lifters.append(_RealTensors(fake_mode, {id(t): flat[n + k] for k, t in enumerate(closure)}, made_here=True))
        with lifters[-1]:
            return fn(*flat[:n])

    extra = [fake_mode.from_tensor(t, static_shapes=True) for t in closure]
    graph = trace(lifted, [*fake_inputs, *extra])
    return graph, set().union(*(m.used for m in lifters))
