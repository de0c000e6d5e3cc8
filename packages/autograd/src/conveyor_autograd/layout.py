"""The calling conventions of the forward and backward graphs: ``AutogradLayout``.

Four index spaces meet in this stage, each with its own type:

* :data:`InputIdx`: a placeholder of the request the stage receives (and of
  the forward graph, which keeps every one of them);
* :data:`OutputIdx`: an output of the request the stage receives;
* :data:`SavedIdx`: a value the forward graph saves for the backward graph;
* :data:`TangentIdx`: a tangent of the backward graph, the gradient of
  output ``diff_outputs[j]``.

The forward graph returns ``(*user outputs, *saved tensors, *saved symbols)``;
the backward graph takes ``(*saved tensors, *saved symbols, *tangents)`` and
returns one gradient per :attr:`AutogradLayout.grad_inputs`. This object is the
one mapping between those positions; nothing else computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NewType

InputIdx = NewType("InputIdx", int)
OutputIdx = NewType("OutputIdx", int)
SavedIdx = NewType("SavedIdx", int)
TangentIdx = NewType("TangentIdx", int)


@dataclass(frozen=True)
class AutogradLayout:
    """What the forward and backward graphs take and return.

    :ivar num_inputs: placeholders of the forward graph (the request's inputs).
    :ivar num_outputs: user outputs, first among the forward graph's outputs.
    :ivar grad_inputs: backward output ``j`` is the gradient of input
        ``grad_inputs[j]``; other inputs get no gradient (``None``, as eager).
    :ivar diff_outputs: tangent ``j`` of the backward graph is the gradient
        flowing into output ``diff_outputs[j]``.
    :ivar non_differentiable: tensor outputs that do not require grad in eager
        (integer, boolean, detached or independent of every input that does).
    :ivar num_saved_tensors: tensors saved with ``save_for_backward``.
    :ivar num_saved_symbols: non-tensor values (SymInts) saved on the context.
    """

    num_inputs: int
    num_outputs: int
    grad_inputs: tuple[InputIdx, ...]
    diff_outputs: tuple[OutputIdx, ...]
    non_differentiable: tuple[OutputIdx, ...]
    num_saved_tensors: int
    num_saved_symbols: int

    def __post_init__(self) -> None:
        for name, bound in (
            ("grad_inputs", self.num_inputs),
            ("diff_outputs", self.num_outputs),
            ("non_differentiable", self.num_outputs),
        ):
            value = getattr(self, name)
            if len(set(value)) != len(value):
                raise ValueError(f"AutogradLayout: {name} has duplicates: {value}")
            if any(not 0 <= v < bound for v in value):
                raise ValueError(f"AutogradLayout: {name} {value} out of range [0, {bound})")
        if set(self.diff_outputs) & set(self.non_differentiable):
            raise ValueError("AutogradLayout: an output cannot be both differentiable and not")
        if not self.diff_outputs:
            raise ValueError("AutogradLayout: no differentiable output (the stage passes such programs through)")
        if min(self.num_saved_tensors, self.num_saved_symbols) < 0:
            raise ValueError("AutogradLayout: negative saved counts")

    @property
    def num_saved(self) -> int:
        return self.num_saved_tensors + self.num_saved_symbols

    def split_forward_outputs(self, outs: Sequence[Any]) -> tuple[Sequence[Any], Sequence[Any], Sequence[Any]]:
        """The forward graph's outputs as (user outputs, saved tensors, saved symbols)."""
        n, t = self.num_outputs, self.num_outputs + self.num_saved_tensors
        return outs[:n], outs[n:t], outs[t:]

    def backward_args(self, tensors: Sequence[Any], symbols: Sequence[Any], grad_outputs: Sequence[Any]) -> list[Any]:
        """The backward graph's arguments from the saved values and the
        gradients of every user output (by :data:`OutputIdx`)."""
        return [*tensors, *symbols, *(grad_outputs[k] for k in self.diff_outputs)]

    def input_grads(self, grads: Sequence[Any]) -> list[Any]:
        """One gradient per :data:`InputIdx` (``None`` where none is computed)."""
        out: list[Any] = [None] * self.num_inputs
        for j, i in enumerate(self.grad_inputs):
            out[i] = grads[j]
        return out
