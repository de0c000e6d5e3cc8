"""Whether a tensor's layout holds symbols (symbolic sizes, strides or
storage offset), asked of every input of every trace.

Note [Reading the symbolic flag]: a tensor whose layout holds a symbol
carries torch's ``has_symbolic_sizes_strides`` flag (read in Python as
``Tensor._has_symbolic_sizes_strides``), set whenever a size, stride or the
storage offset is a symbolic integer that is not a constant. Reading the
flag is one attribute; reading the layout builds a Python integer or
``SymInt`` per dimension and scans them (a CNN's hundreds of parameters,
at each trace's start). The flag is only ever trusted to say *no symbols*,
and only for a strided tensor: anything it flags, and every other layout,
is decided by the scan itself, so a flag set for symbols that are
constants (which the scan reads as ints) changes nothing. Where torch has
no such attribute, or it does not read ``False`` on a plain tensor, the
scan decides everything.
"""

from __future__ import annotations

import torch


def symbolic_layout(t: torch.Tensor) -> bool:
    """A size of ``t`` is a ``SymInt``, or (strided) a stride or its storage
    offset is (Note [Reading the symbolic flag])."""
    if t.layout is not torch.strided:
        return any(isinstance(d, torch.SymInt) for d in t.shape)
    if _FLAG and not t._has_symbolic_sizes_strides:
        return False
    return any(isinstance(d, torch.SymInt) for d in (*t.shape, *t.stride(), t.storage_offset()))


def _probe() -> bool:
    try:
        return torch.zeros(2, 3)._has_symbolic_sizes_strides is False
    except AttributeError:
        return False


#: torch has the flag, and it reads ``False`` on a plain tensor
_FLAG = _probe()
