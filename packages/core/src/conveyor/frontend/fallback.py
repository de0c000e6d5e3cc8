"""Programs conveyor runs eagerly instead, with a warning.

Note [Custom autograd functions] (in ``conveyor.frontend.functions``): a Function
applied to tensors that require grad is captured as one node that keeps its
own backward; one that cannot be (it writes its inputs, returns one of them,
its forward cannot run on fake tensors...) runs the program eagerly, with a
warning, for that specialization.

Note [Reentrant checkpointing]: ``torch.utils.checkpoint(fn, *args,
use_reentrant=True)`` applies ``CheckpointFunction``, whose backward runs
``fn`` again and differentiates it: the same gradients as differentiating
``fn`` directly, for less memory. Capture traces ``fn`` in its place, so the
program compiles; what to save and what to recompute is then the partitioner's
choice, as for any other part of the graph. What the Function returns is
kept as eager has it: only the tensors ``fn`` returns directly or in a returned
tuple are its outputs; a tensor nested deeper (a list of outputs) was computed
under ``no_grad`` and comes back detached (``_checkpoint_outputs``).
(Non-reentrant checkpointing applies no Function and traces as it is.)

Note [Autograd state changed by the program] is in ``conveyor.frontend.autograd_state``.

Note [Seeding inside the program]: ``torch.manual_seed`` (or ``seed``,
``set_rng_state``, their ``torch.random`` and ``torch.cuda`` forms) is plain
Python: a trace runs it once and records nothing, so the compiled program
would not reseed on each call as eager does. Such a program runs eagerly,
with a warning. The capture sees these calls without replacing any of
torch's attributes: Note [Watching seeding without patching torch] in
``conveyor.frontend.call_watch``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.autograd.function import Function
from torch.utils.checkpoint import CheckpointFunction

from conveyor.analysis.grad_regions import recorded_with_grad
from conveyor.analysis.saved_hooks import caller_saved_hooks_hidden
from conveyor.errors import ConveyorError, DynamoSplits, EagerFallback
from conveyor.frontend import call_watch, functions
from conveyor.frontend.compiling import compiling


@contextlib.contextmanager
def watching_capture(seeding: bool = True) -> Iterator[None]:
    """While tracing in this thread, a custom ``autograd.Function`` applied to
    tensors that require grad (grad mode on), or a reseeding of the global
    generator, raises :class:`EagerFallback`. Other threads are not affected
    (Note [Watching a capture, thread by thread]). ``seeding=False``: a graph
    dynamo made, which holds no Python call (dynamo ran the program's Python,
    a reseed included), is traced without the seeding watch and its cost."""
    with _install_lock:
        if _installed[0] == 0:
            _install()
        _installed[0] += 1
    outermost = not watching()
    _capturing.depth = getattr(_capturing, "depth", 0) + 1
    try:
        # Note [Saved-tensor hooks while tracing], Note [A capture is a compile]
        with caller_saved_hooks_hidden(), compiling():
            with call_watch.watching_calls() if outermost and seeding else contextlib.nullcontext():
                yield
    except Exception as exc:
        if not isinstance(exc, ConveyorError) and _unrecordable_argument(exc):
            # Note [Arguments a graph cannot hold]: an op given a storage (cuDNN's RNN
            # weights are flattened with set_(storage, ...) on CUDA), which FX has no
            # node argument for
            raise EagerFallback(
                f"an op in it takes an argument a graph cannot hold ({str(exc).splitlines()[0]}) "
                "(Note [Arguments a graph cannot hold])"
            ) from exc
        if not isinstance(exc, ConveyorError) and not _raised_by_torch_python_kernel(exc) and _in_hop(exc):
            # Note [Higher-order ops the capture cannot trace]
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise DynamoSplits(
                f"tracing a higher-order op in it raised {type(exc).__name__} ({first}) "
                "(Note [Higher-order ops the capture cannot trace])"
            ) from exc
        if isinstance(exc, ConveyorError) or not _raised_by_torch_python_kernel(exc):
            raise
        # Note [Errors of torch's Python kernels]
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise EagerFallback(
            f"capture on fake tensors raised {type(exc).__name__} ({first}) in one of torch's Python kernels, "
            "which may refuse what eager's kernel runs or raise another error type "
            "(Note [Errors of torch's Python kernels])"
        ) from exc
    finally:
        _capturing.depth -= 1
        with _install_lock:
            _installed[0] -= 1
            if _installed[0] == 0:
                _uninstall()


# Note [Errors of torch's Python kernels]: capture runs the program on fake
# tensors, through torch's meta registrations and Python references
# (``torch/_meta_registrations.py``, ``torch/_refs``, ``torch/_prims``,
# ``torch/_decomp``), not eager's C++ kernels. These do not always agree with
# eager on what they refuse: ``bool_tensor << 1`` runs in eager (the meta
# kernel demands an integral dtype), and ``bool_tensor // 1`` raises
# ``NotImplementedError`` in eager but ``RuntimeError`` in the reference. An
# error raised from one of them during capture makes that specialization run
# eagerly, with a warning: eager's kernel then decides (its result, or its
# error with eager's type and message).
_PYTHON_KERNEL_FILES = tuple(
    os.path.join(os.path.dirname(torch.__file__), part)
    for part in ("_meta_registrations.py", "_refs" + os.sep, "_prims" + os.sep, "_prims_common" + os.sep, "_decomp" + os.sep)
)


# Note [Higher-order ops the capture cannot trace]: a higher-order op the program
# calls directly (not one that compiles itself through dynamo: Note [Compiled
# functions inside a capture]) is traced by its own rule for make_fx, which may
# need what conveyor's capture does not give it: ``while_loop_stack_output``'s
# fake-tensor rule asks the fake mode for a shape environment (static shapes
# have none: AttributeError), ``flex_attention_backward`` given no joint graph
# calls None while eager's kernel never uses it (TypeError). An error raised
# while one of torch's higher-order ops traces (a frame in
# ``torch/_higher_order_ops``) compiles the program through dynamo, whose
# tracing of higher-order ops is torch's reference; a user's own error there is
# raised again by dynamo or by eager's run of the frame.
_HOP_FILES = os.path.join(os.path.dirname(torch.__file__), "_higher_order_ops") + os.sep


def _in_hop(exc: BaseException) -> bool:
    return any(f.startswith(_HOP_FILES) for f in _files(exc))


def _raised_by_torch_python_kernel(exc: BaseException) -> bool:
    """Whether ``exc`` was raised in one of torch's meta registrations or
    Python references (its innermost frame, past ``torch._check``'s own in
    ``torch/__init__.py``)."""
    frames = _files(exc)
    while frames and frames[-1] == _TORCH_INIT:
        frames.pop()
    return bool(frames) and frames[-1].startswith(_PYTHON_KERNEL_FILES)


_TORCH_INIT = os.path.join(os.path.dirname(torch.__file__), "__init__.py")
_FX_PROXY = os.path.join(os.path.dirname(torch.__file__), "fx", "proxy.py")


def _unrecordable_argument(exc: BaseException) -> bool:
    """``exc`` is FX refusing to record an op's argument (``argument of type:
    <class 'torch.storage.UntypedStorage'>``), raised in ``torch/fx/proxy.py``."""
    files = _files(exc)
    return isinstance(exc, NotImplementedError) and files[-1:] == [_FX_PROXY] and "argument of type" in str(exc)


def _files(exc: BaseException) -> list[str]:
    """The file of each frame ``exc`` passed through, the innermost last."""
    files = []
    tb = exc.__traceback__
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return files


# Note [Watching a capture, thread by thread]: ``Function.apply`` is Python
# (torch 2.13) or C (2.14) below no dispatch or function mode, so a capture
# can only turn an application into one node by wrapping it (Note [Why
# Function.apply is still wrapped]). The wrapper is installed once while any
# thread captures (counted) and consults a thread-local flag: in a thread
# that is not capturing it is torch's own ``apply``, called through. Seeding
# is watched in the capturing thread alone, with nothing of torch's replaced
# (Note [Watching seeding without patching torch] in ``call_watch``).
_capturing = threading.local()
_installed = [0]  # captures in flight, all threads
_install_lock = threading.Lock()
# Note [Where Function.apply lives]: a classmethod in Python up to torch 2.13, a
# descriptor implemented in C from 2.14 (no ``__func__``). Both bind to a class
# through ``__get__(None, cls)``, which is how the original is called; the probe
# below fails at import if ``apply`` is no longer a descriptor on ``Function``
# itself, which the wrapping relies on.
#
# Note [Why Function.apply is still wrapped]: capture must *replace* an
# application by a ``conveyor::apply_function`` node (Note [Custom autograd
# functions]), not only see it, and nothing torch offers reaches ``apply``
# without replacing it (checked with torch 2.13 and 2.14.1):
# - a ``TorchFunctionMode`` sees only the ops of the Function's forward
#   (``mul``), never ``apply``; a dispatch mode sees less (below autograd);
# - 2.13's Python ``apply`` goes to functorch's ``custom_function_call`` (a
#   higher-order op a mode could take) only while a functorch transform is
#   active (``torch._C._are_functorch_transforms_active()``, a thread-local
#   interpreter stack): pushing one would run the whole program under that
#   transform's wrappers, a different trace; 2.14's C ``apply`` enters
#   Python only at the Function's own ``forward``;
# - a profile hook (as seeding uses) sees the call but cannot return a value
#   in its place.
# So the wrapper stays, installed only while a capture is in flight and a
# pass-through in every thread that is not capturing. What it misses (an
# ``apply`` bound before the capture began) is refused from the outputs'
# autograd graph (Note [Functions applied past the capture] in
# ``conveyor.frontend.autograd_state``).
def _original_apply() -> Any:
    found = Function.__dict__.get("apply")
    if found is None or not hasattr(found, "__get__"):
        raise ImportError(
            f"conveyor: torch {torch.__version__} defines no torch.autograd.Function.apply descriptor on Function "
            f"itself (found {found!r}); the capture's watch for custom autograd Functions "
            "(Note [Where Function.apply lives] in conveyor.frontend.fallback) needs updating for this torch"
        )
    return found


_ORIGINAL_APPLY = _original_apply()


def watching() -> bool:
    """A capture in this thread watches the program (:func:`watching_capture`)."""
    return bool(getattr(_capturing, "depth", 0))


def _checked_apply(cls: type, *args: Any, **kwargs: Any) -> Any:
    if watching() and torch.is_grad_enabled() and cls.__module__ == _CUSTOM_OP_AUTOGRAD:
        with recorded_with_grad():  # Note [Custom ops]
            return original_apply(cls, *args, **kwargs)
    if watching() and torch.is_grad_enabled() and any(
        t.requires_grad for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
    ):
        if cls is CheckpointFunction and not kwargs:  # Note [Reentrant checkpointing]
            run_function, _preserve_rng_state, *inner = args
            return _checkpoint_outputs(run_function(*inner), inner)
        applied = functions.probe(cls, args) if not kwargs else "it is applied with keyword arguments"
        if isinstance(applied, str):
            raise EagerFallback(
                f"torch.autograd.Function {cls.__qualname__} cannot be captured as one node with its own "
                f"backward: {applied} (Note [Custom autograd functions] in conveyor.frontend.functions)"
            )
        return functions.apply_as_node(applied, args)
    return original_apply(cls, *args, **kwargs)


def _checkpoint_outputs(out: Any, inputs: list[Any]) -> Any:
    """What ``CheckpointFunction.apply`` returns when ``run_function`` gave
    ``out``, traced in its place (Note [Reentrant checkpointing]). The
    Function's outputs are the tensors the function returns directly or as
    elements of a returned tuple: an input returned as it is comes back as a
    view of it. A tensor nested deeper (in a list, a dict, a tuple in the
    tuple) is no output of the Function: eager computed it under ``no_grad``,
    so it comes back detached."""
    top = out if isinstance(out, tuple) else (out,)
    fixed = tuple(
        (o.view_as(o) if any(o is i for i in inputs) else o)
        if isinstance(o, torch.Tensor)
        else pytree.tree_map_only(torch.Tensor, torch.Tensor.detach, o)
        for o in top
    )
    return fixed if isinstance(out, tuple) else fixed[0]


# Note [Custom ops]: a ``torch.library.custom_op`` with ``register_autograd``
# differentiates through a Function torch makes for it (in this module), whose
# forward runs the op below autograd: a trace records the op as one node, and
# every later trace at the autograd level runs the op's own autograd formula.
# It is applied as it is; the node it records is tagged with the caller's grad
# mode, not the ``no_grad`` of the Function's forward.
_CUSTOM_OP_AUTOGRAD = "torch._library.autograd"



def original_apply(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``cls.apply(*args)`` through torch's own ``Function.apply``, whether or
    not a capture has wrapped it."""
    return _ORIGINAL_APPLY.__get__(None, cls)(*args, **kwargs)


def _install() -> None:
    Function.apply = classmethod(_checked_apply)  # type: ignore[method-assign,assignment]


def _uninstall() -> None:
    Function.apply = _ORIGINAL_APPLY  # type: ignore[method-assign]
