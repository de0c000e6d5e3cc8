"""The inner graph's outputs, and what this stage's epilogue does with them.

The inner graph returns the user's outputs, then one extra output per merged
input whose metadata the program changes: that input as the program leaves
it, a view of the base. The epilogue gives each caller's tensor that view's
sizes, strides and storage offset (``as_strided_``; the data already reached
it through the base), drops the extra outputs, and hands back the caller's
own tensor wherever the program returns a merged input itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NewType

import torch

from conveyor_synthetic_base.mapping import OuterIdx

UserOutIdx = NewType("UserOutIdx", int)


@dataclass(frozen=True)
class OutputLayout:
    """How the inner graph's outputs are laid out.

    :ivar user_count: the user's outputs come first, this many.
    :ivar metadata_of: then one extra output per merged input whose
        metadata is mutated, in this order.
    :ivar returns_input: user outputs that are a merged input itself.
    """

    user_count: int
    metadata_of: tuple[OuterIdx, ...]
    returns_input: tuple[tuple[UserOutIdx, OuterIdx], ...]

    def __post_init__(self) -> None:
        if len(set(self.metadata_of)) != len(self.metadata_of):
            raise ValueError(f"OutputLayout: an input's metadata is written back twice: {self.metadata_of}")
        if any(not 0 <= k < self.user_count for k, _ in self.returns_input):
            raise ValueError(f"OutputLayout: returned inputs {self.returns_input} outside {self.user_count} outputs")

    @property
    def inner_count(self) -> int:
        return self.user_count + len(self.metadata_of)

    def apply(self, outer: Sequence[Any], inner_outs: Sequence[Any]) -> list[Any]:
        """Run the epilogue on the caller's inputs; return the user's outputs."""
        user = list(inner_outs[: self.user_count])
        for o, after in zip(self.metadata_of, inner_outs[self.user_count :]):
            t = outer[o]
            version = None if t.is_inference() else t._version  # inference tensors have no version
            if torch.is_grad_enabled() and t.requires_grad and not t.is_leaf:
                # eager records the metadata change (``t_()`` gives it a
                # ``TBackward``): gradients of the input as the program left
                # it must map back through the new geometry
                t.as_strided_(after.size(), after.stride(), after.storage_offset())
            else:
                with torch.no_grad():
                    t.as_strided_(after.size(), after.stride(), after.storage_offset())
            # Note [Re-striding after the outputs exist]: eager changes the
            # metadata before it makes its outputs; here the inner stages have
            # already made them, some maybe views of the same storage
            # (``unbind`` outputs, which a version bump on their base
            # invalidates). The data is unchanged: keep the version.
            if version is not None:
                torch._C._autograd._unsafe_set_version_counter((t,), (version,))
        for k, o in self.returns_input:
            user[k] = outer[o]
        return user
