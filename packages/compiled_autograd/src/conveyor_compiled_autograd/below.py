"""Note [Below autograd]: a compiled segment runs with grad mode off, yet each
of its ops still passes torch's ``Autograd`` kernel (which, seeing no grad
mode, only redispatches) and, for a view, the ``ADInplaceOrView`` kernel,
which records the view's base and shares its version counter. A two-block
transformer's segment (105 ops) spends about 25 µs of its 1.45 ms there.
Those records matter only to autograd and to in-place writes: a view
inside a segment that writes nothing is read by the segment's next ops and
dropped. So on the fast path of Note [The last variant first] the segment
runs under ``torch._C._AutoDispatchBelowADInplaceOrView`` (the guard torch's
own autograd kernels use to reach the kernels below them) where all of this
holds:

* its graph writes no input (the functional pipeline compiled it);
* grad mode is off (no output would require grad in eager either);
* no dispatch mode is active and no functorch transform is: a
  ``CompositeImplicitAutograd`` op (``linear``) below autograd reaches a
  mode as itself, not as the ops it is made of, so a mode would see other
  calls (the tensors are plain: the fast path's check refuses subclasses);
* every tensor output shares storage with no input and no other output:
  none is a view whose base or version counter a caller could read. This is
  decided once per check, from the first call run the ordinary way (a
  program run on inputs of the same layouts makes the same outputs views of
  its inputs or of each other, as ``recheck``'s Note says for fresh outputs).

The kernels and their arguments are the same, so the values are bit for bit
the same (tested against the ordinary run).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from conveyor_compiled_autograd.accumulate import fresh_outputs

#: the guard, where the installed torch has it (else segments run the ordinary way)
GUARD: Any = getattr(torch._C, "_AutoDispatchBelowADInplaceOrView", None)
_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
_functorch = getattr(torch._C, "_are_functorch_transforms_active", None)
_grad = torch.is_grad_enabled


def unobserved() -> bool:
    """Whether nothing but the kernels would see the segment's calls now:
    grad mode off, no dispatch mode, no functorch transform (see the Note)."""
    if _grad() or _modes is None or _functorch is None:
        return False
    return _modes() == 0 and not _functorch()


def separate(values: Sequence[Any], outs: Sequence[Any]) -> tuple[list[bool], bool]:
    """``fresh_outputs(values, outs)``, and whether every tensor output is
    fresh (in storage no input and no other output uses)."""
    flags = fresh_outputs(values, outs)
    return flags, GUARD is not None and all(f for f, o in zip(flags, outs, strict=True) if o is not None)
