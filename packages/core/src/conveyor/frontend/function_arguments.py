"""The arguments of one application of a custom autograd Function (Note
[Custom autograd functions] in ``conveyor.frontend.functions``).

Note [Graphs a Function rewrites]: eager applies a Function once per call,
to what the program hands it that call. Conveyor applies one application
several times: on stand-ins when capture probes it, on fake tensors in each
trace, and once per call at run time, every time with the constants capture
saw. A forward that rewrites a constant it is given sees its own earlier
rewrite the next time: torch's ``scan`` autograd Function
(``ScanAutogradOp``) gets the forward and backward graphs it partitioned for
this call and rewrites them in place (it drops the forward outputs that are
``xs``, clones the carries), so its second application read a graph already
rewritten and called the backward graph with one tangent too few (a
TypeError at ``backward``, on both entries). So the constants that hold FX
graphs are copied before the probe runs the application; if the probe
rewrote a graph (its code changed), the copy is kept and every application
gets a fresh copy of it (:attr:`Arguments.fresh`; graphs copied, their
tensors shared), as eager's gets a fresh partition. A forward that leaves
its graphs alone (``cond``'s) keeps the ones it was given.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.fx

Grads = list[torch.Tensor | None]


@dataclass(frozen=True)
class Arguments:
    """The arguments of one application with its tensors (at
    ``tensor_positions``) and symbolic ints (at ``int_positions``) left out
    (``None``): what the node passes at run time and what it holds."""

    template: tuple[Any, ...]
    tensor_positions: tuple[int, ...]
    int_positions: tuple[int, ...]
    #: constants copied anew for each application (Note [Graphs a Function rewrites])
    fresh: tuple[int, ...] = ()

    @staticmethod
    def of(args: Sequence[Any]) -> Arguments:
        tensors = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        ints = tuple(i for i, a in enumerate(args) if isinstance(a, torch.SymInt))
        template = tuple(None if i in tensors or i in ints else a for i, a in enumerate(args))
        return Arguments(template, tensors, ints)

    def snapshot(self) -> dict[int, Any]:
        """A copy of each constant that holds graphs, by position, taken
        before an application may rewrite them (Note [Graphs a Function rewrites])."""
        return {i: _copy(a) for i, a in enumerate(self.template) if _graphs(a)}

    def rewritten(self, snapshot: dict[int, Any]) -> Arguments:
        """These arguments, where an application rewrote the graphs of a
        constant (its code is no longer the ``snapshot``'s), with the
        snapshot in its place, copied anew for each application."""
        fresh = tuple(
            i
            for i, kept in snapshot.items()
            if [g.code for g in _graphs(kept)] != [g.code for g in _graphs(self.template[i])]
        )
        if not fresh:
            return self
        template = tuple(snapshot[i] if i in fresh else a for i, a in enumerate(self.template))
        return replace(self, template=template, fresh=fresh)

    def tensors(self, args: Sequence[Any]) -> list[torch.Tensor]:
        return [args[i] for i in self.tensor_positions]

    def ints(self, args: Sequence[Any]) -> list[Any]:
        return [args[i] for i in self.int_positions]

    def fill(self, tensors: Sequence[torch.Tensor], ints: Sequence[Any]) -> list[Any]:
        args = list(self.template)
        for pos in self.fresh:
            args[pos] = _copy(args[pos])
        for pos, t in zip(self.tensor_positions, tensors, strict=True):
            args[pos] = t
        for pos, n in zip(self.int_positions, ints, strict=True):
            args[pos] = n
        return args


def _graphs(value: Any) -> list[torch.fx.GraphModule]:
    """The FX graphs ``value`` is or holds as an attribute (torch's
    ``HopPartitionedGraph`` holds its forward and backward)."""
    if isinstance(value, torch.fx.GraphModule):
        return [value]
    if isinstance(value, (torch.nn.Module, type)) or not hasattr(value, "__dict__"):
        return []
    return [v for v in vars(value).values() if isinstance(v, torch.fx.GraphModule)]


def _copy(value: Any) -> Any:
    """A deep copy of ``value`` whose graphs share their tensors (parameters,
    buffers, constants) with ``value``'s: the graphs are what a Function
    rewrites, and a tensor the user updates must stay the one it reads."""
    memo: dict[int, Any] = {}
    for gm in _graphs(value):
        for module in gm.modules():
            for t in [*module._parameters.values(), *module._buffers.values(), *vars(module).values()]:
                if isinstance(t, torch.Tensor):
                    memo[id(t)] = t
    return copy.deepcopy(value, memo)
