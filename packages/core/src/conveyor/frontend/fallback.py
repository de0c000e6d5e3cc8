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
choice, as for any other part of the graph. (Non-reentrant checkpointing
applies no Function and traces as it is.)

Note [Autograd state changed by the program] is in ``conveyor.frontend.autograd_state``.

Note [Seeding inside the program]: ``torch.manual_seed`` (or ``seed``,
``set_rng_state``, their ``torch.random`` and ``torch.cuda`` forms) is plain
Python: a trace runs it once and records nothing, so the compiled program
would not reseed on each call as eager does. Such a program runs eagerly,
with a warning. The capture sees these calls without replacing any of
torch's attributes: Note [Watching seeding without patching torch].
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.autograd.function import Function
from torch.utils.checkpoint import CheckpointFunction

from conveyor.analysis.grad_regions import recorded_with_grad
from conveyor.analysis.saved_hooks import caller_saved_hooks_hidden
from conveyor.errors import ConveyorError, DynamoSplits, EagerFallback
from conveyor.frontend import functions
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
            with _watching_seeding() if outermost and seeding else contextlib.nullcontext():
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
# (Note [Watching seeding without patching torch]).
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
            return run_function(*inner)
        applied = functions.probe(cls, args) if not kwargs else "it is applied with keyword arguments"
        if isinstance(applied, str):
            raise EagerFallback(
                f"torch.autograd.Function {cls.__qualname__} cannot be captured as one node with its own "
                f"backward: {applied} (Note [Custom autograd functions] in conveyor.frontend.functions)"
            )
        return functions.apply_as_node(applied, args)
    return original_apply(cls, *args, **kwargs)


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


# Note [Watching seeding without patching torch]: while this thread captures,
# a profile hook (``sys.setprofile``: this thread's only) looks at each Python
# call for the code of the seeding functions and raises :class:`EagerFallback`
# as one starts, before it has run: the caller's generators are untouched, as
# eager's would be by the call that has not happened yet. Why a hook and not
# a comparison of the generators before and after the trace (fake tensors
# draw nothing from them, so a change would be the program's):
# - the default generators are the process's: another thread drawing from
#   them while this one traces would look like a reseed (a spurious
#   fallback), and rewinding them afterwards would repeat its numbers;
# - a program that sets the state the generator already has
#   (``manual_seed(0)`` just after the caller's own) changes nothing that can
#   be compared, yet eager reseeds on every call and a compiled graph would
#   not: the second call's random numbers would differ.
# The hook catches both, and sees the functions however the program reached
# them (``from torch import manual_seed`` included, and through the wrapper
# ``import torch._dynamo`` puts on ``torch.manual_seed``, which the old
# attribute patch kept from applying when dynamo was first imported during
# a capture).
# Its cost is the capture's only: every Python call in the trace goes through
# it, which made a TransformerEncoderLayer's ``make_fx`` trace 1.5-2.2x as
# long. So it is off while a torch function the program called runs
# (``call_unwatched``, from the capture's function mode: the tracer's and
# torch's own Python, most of a trace's calls, never a reseed), and a graph
# dynamo made is traced without it (``watching_capture(seeding=False)``):
# a 2-layer GPT-2's first ``conveyor.compile`` call went from about 450 to
# 500 ms (10%, on a loaded 2-core machine), behind dynamo nothing.
# Where the thread already runs a profiler that Python cannot hand back (cProfile, torch.profiler's stack
# tracer: ``sys.getprofile()`` is not callable), the hook is not installed
# and the comparison is the fallback, with the limits above; a profile
# function that is callable is called first by the hook, then the hook looks.
# A generator's own methods (``torch.default_generator.manual_seed``) are
# C and not watched, as they never were.
def _seeding_code() -> dict[CodeType, str]:
    """The code of each seeding function, and the name a message gives it."""
    functions: dict[str, Callable[..., Any]] = {
        "torch.manual_seed": torch.random.manual_seed,
        "torch.seed": torch.random.seed,
        "torch.set_rng_state": torch.random.set_rng_state,
        "torch.cuda.manual_seed": torch.cuda.manual_seed,
        "torch.cuda.manual_seed_all": torch.cuda.manual_seed_all,
        "torch.cuda.seed": torch.cuda.seed,
        "torch.cuda.seed_all": torch.cuda.seed_all,
        "torch.cuda.set_rng_state": torch.cuda.set_rng_state,
        "torch.cuda.set_rng_state_all": torch.cuda.set_rng_state_all,
    }
    return {fn.__code__: name for name, fn in functions.items()}


_SEEDING_CODE = _seeding_code()


def _reseeding(what: str) -> EagerFallback:
    return EagerFallback(f"it {what}, which a captured graph cannot replay (Note [Seeding inside the program])")


# Note [Compiled functions inside a capture]: a program may call a function
# ``torch.compile`` optimized, and ``torch.cond``, ``while_loop``, ``scan``
# and ``map`` called outside dynamo compile themselves so. Under a capture's
# dispatch modes dynamo does not compile that frame: it marks the function's
# code to be skipped for the rest of the process (every later eager
# ``torch.cond`` then fails inside its autograd Function), or refuses the
# symbolic trace (RuntimeError). Dynamo traces such a program whole (it
# inlines the compiled function, and records ``torch.cond`` as the op with
# traced branches), so the same hook refuses dynamo's compile wrapper as it
# starts and ``conveyor.compile`` compiles the program through dynamo
# (Note [Programs only dynamo can split]).
#
# The wrapper is known by its code's name and file, so that importing
# conveyor does not import dynamo (which imports triton, whose interpreter
# is chosen by the environment at its first import).
def _eval_frame_file() -> str:
    """The file of dynamo's ``torch.compile`` wrapper (probed: the wrapper's
    code is ``compile_wrapper``, nested in ``_TorchDynamoContext.__call__``,
    on torch 2.11 to 2.14)."""
    path = os.path.join(os.path.dirname(torch.__file__), "_dynamo", "eval_frame.py")
    if not os.path.exists(path):
        raise ImportError(
            f"conveyor: torch {torch.__version__} has no {path}; the capture's watch for compiled functions "
            "(Note [Compiled functions inside a capture] in conveyor.frontend.fallback) needs updating for this torch"
        )
    return path


_EVAL_FRAME_FILE = _eval_frame_file()


def _refuse_seeding(frame: FrameType, event: str, arg: Any) -> None:
    """The profile hook: a seeding function or a function ``torch.compile``
    optimized starting raises (CPython then removes the hook from this
    thread; the capture restores the caller's)."""
    if event == "call":
        name = _SEEDING_CODE.get(frame.f_code)
        if name is not None:
            _capturing.refused = _reseeding(f"calls {name}")
            raise _capturing.refused
        if frame.f_code.co_name == "compile_wrapper" and frame.f_code.co_filename == _EVAL_FRAME_FILE:
            _capturing.refused = DynamoSplits(
                "it calls a function torch.compile optimized (torch.cond, while_loop, scan and map optimize "
                "themselves) (Note [Compiled functions inside a capture])"
            )
            raise _capturing.refused


def _after(previous: Callable[..., Any]) -> Callable[[FrameType, str, Any], None]:
    """The hook, called after the thread's own (Python) profile function."""

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        previous(frame, event, arg)
        _refuse_seeding(frame, event, arg)

    return hook


@contextlib.contextmanager
def _watching_seeding() -> Iterator[None]:
    """Note [Watching seeding without patching torch]. A program that caught
    the refusal and went on still runs eagerly: the call is remembered."""
    _capturing.refused = None
    previous = sys.getprofile()
    if previous is not None and not callable(previous):
        with _generators_unchanged():
            yield
        return
    hook = _refuse_seeding if previous is None else _after(previous)
    _capturing.profiles = (hook, previous)
    sys.setprofile(hook)
    try:
        yield
    finally:
        _capturing.profiles = None
        sys.setprofile(previous)
    if _capturing.refused is not None:
        raise _capturing.refused


def call_unwatched(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)`` with the seeding hook off: a torch function
    the program calls (the capture's function mode sees each), whose dispatch
    through the tracer is torch's own Python and never a reseed. It is most
    of a trace's Python calls, so the hook costs a trace a little, not double
    (Note [Watching seeding without patching torch])."""
    profiles = getattr(_capturing, "profiles", None)
    if profiles is None:
        return func(*args, **kwargs)
    hook, previous = profiles
    sys.setprofile(previous)
    try:
        return func(*args, **kwargs)
    finally:
        sys.setprofile(hook)


@contextlib.contextmanager
def _generators_unchanged() -> Iterator[None]:
    """The fallback of Note [Watching seeding without patching torch]: the
    default generators' states compared around the trace, and put back when
    they changed (eager's run then starts from the caller's state)."""
    before = _generator_states()
    yield
    after = _generator_states()
    if len(after) != len(before) or not all(torch.equal(a, b) for a, b in zip(after, before, strict=False)):
        _set_generator_states(before)
        raise _reseeding("reseeds torch's default generator while it is traced")


def _generator_states() -> list[torch.Tensor]:
    """The CPU default generator's state, and each CUDA device's once CUDA is initialized."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return [torch.get_rng_state(), *cuda]


def _set_generator_states(states: list[torch.Tensor]) -> None:
    torch.set_rng_state(states[0])
    if len(states) > 1:
        torch.cuda.set_rng_state_all(states[1:])


def _install() -> None:
    Function.apply = classmethod(_checked_apply)  # type: ignore[method-assign,assignment]


def _uninstall() -> None:
    Function.apply = _ORIGINAL_APPLY  # type: ignore[method-assign]
