"""Global state a graph's trace sets and unsets, put back when the trace stops.

Note [Transform state a stopped trace leaves]: dynamo writes ``torch.func.grad``
(``vmap``, ``jvp``, ``functionalize``) into its graph as flat calls that set
process-wide state and unset it later in the same graph:
``_grad_increment_nesting()`` ... ``_grad_decrement_nesting()``,
``_saved_tensors_hooks_disable(msg)`` ... ``_saved_tensors_hooks_enable()``,
``set_inplace_requires_grad_allowed(True)`` ... ``(False)``. The capture runs
the graph, so these calls happen for real; when it stops between the two halves
(a refusal: the graph calls ``requires_grad_`` inside the transform, Note
[Autograd state changed by the program]), nothing unsets them: no Python
``with`` block unwinds, as it would for the transform itself in a standalone
program. The functorch interpreters stayed pushed, and dynamo's guard on the
(empty) transform stack failed on the frame that made it ("Guard failed on the
same frame it was created"; test_cpu_repro.py's programs calling
``torch.func.grad`` in ``forward``); saved-tensor hooks stayed disabled for the
rest of the process. So the trace of a dynamo graph runs inside
:func:`restored_on_failure`, which puts all three back as they were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

_functorch = torch._C._functorch
_autograd = torch._C._autograd

#: interpreter kind -> what pops it
_DECREMENT = {
    _functorch.TransformType.Grad: _functorch._grad_decrement_nesting,
    _functorch.TransformType.Jvp: _functorch._jvp_decrement_nesting,
    _functorch.TransformType.Vmap: _functorch._vmap_decrement_nesting,
    _functorch.TransformType.Functionalize: _functorch._func_decrement_nesting,
}


def _depth() -> int:
    return len(retrieve_all_functorch_interpreters())


@contextlib.contextmanager
def restored_on_failure() -> Iterator[None]:
    """Run the body; if it raises, pop the functorch interpreters it pushed and
    put saved-tensor hooks and in-place ``requires_grad`` back as they were."""
    depth = _depth()
    hooks_enabled = _autograd._saved_tensors_hooks_is_enabled()  # type: ignore[attr-defined]
    message = None if hooks_enabled else _autograd._saved_tensors_hooks_get_disabled_error_message()
    inplace_allowed = _functorch.get_inplace_requires_grad_allowed()
    try:
        yield
    except BaseException:
        while _depth() > depth:
            interpreter = _functorch.peek_interpreter_stack()
            _DECREMENT[interpreter.key()]()
        if hooks_enabled:
            _autograd._saved_tensors_hooks_enable()
        elif message is not None:
            _autograd._saved_tensors_hooks_disable(message)
        _functorch.set_inplace_requires_grad_allowed(inplace_allowed)
        raise
