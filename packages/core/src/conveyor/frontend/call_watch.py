"""Python calls a capture refuses as they start: seeding, compiled functions, and
``Tensor.as_subclass``.

While this thread captures, a profile hook looks at each Python call the
program makes (Note [Watching seeding without patching torch], Note
[Compiled functions inside a capture]); the hook is this thread's only, and
off while a torch function the program called runs (:func:`call_unwatched`).
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
import torch.utils.checkpoint

from conveyor.errors import DynamoSplits, EagerFallback

#: this thread's hook and the profile function it replaced, and the call it refused
_watch = threading.local()


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
            "(Note [Compiled functions inside a capture] in conveyor.frontend.call_watch) needs updating for this torch"
        )
    return path


_EVAL_FRAME_FILE = _eval_frame_file()


# Note [as_subclass inside a capture]: ``x.as_subclass(T)`` makes a new Python
# object of type ``T`` around ``x``'s C tensor. During a capture ``x`` is a
# FakeTensor (or the tracer's), whose C tensor already belongs to a Python
# object of another type, so torch refuses (a RuntimeError from inside the
# program). It reaches no torch-function or dispatch hook a capture could
# redirect, so the profile hook refuses it as the C call starts (CPython
# reports the bound method, not its arguments: ``as_subclass(torch.Tensor)``
# is refused too) and the program compiles through dynamo, which traces it.
def _refuse_seeding(frame: FrameType, event: str, arg: Any) -> None:
    """The profile hook: a seeding function, a function ``torch.compile``
    optimized, a default generator's state read or written, or
    ``Tensor.as_subclass`` (C calls: the event names the bound method, not its
    arguments) starting raises (CPython then removes the hook
    from this thread; the capture restores the caller's)."""
    if event == "call":
        name = _SEEDING_CODE.get(frame.f_code)
        if name is not None:
            _watch.refused = _reseeding(f"calls {name}")
            raise _watch.refused
        if frame.f_code.co_name == "compile_wrapper" and frame.f_code.co_filename == _EVAL_FRAME_FILE:
            _watch.refused = DynamoSplits(
                "it calls a function torch.compile optimized (torch.cond, while_loop, scan and map optimize "
                "themselves) (Note [Compiled functions inside a capture])"
            )
            raise _watch.refused
    elif event == "c_call" and getattr(arg, "__name__", None) in _GENERATOR_STATE:
        if isinstance(getattr(arg, "__self__", None), torch.Generator) and not _checkpoint_reads(frame, arg):
            # Note [A generator's state in the program]
            _watch.refused = _reseeding(f"calls torch.Generator.{arg.__name__}")
            raise _watch.refused
    elif event == "c_call" and getattr(arg, "__name__", None) == "resize_":
        if isinstance(getattr(arg, "__self__", None), torch.UntypedStorage):  # Note [A storage resized in the program]
            _watch.refused = DynamoSplits(
                "it resizes a tensor's storage (untyped_storage().resize_), which a captured graph cannot replay "
                "(Note [A storage resized in the program])"
            )
            raise _watch.refused
    elif event == "c_call" and getattr(arg, "__name__", None) == "as_subclass":
        if isinstance(getattr(arg, "__self__", None), torch.Tensor):
            _watch.refused = DynamoSplits(
                "it calls Tensor.as_subclass, which cannot rewrap the capture's fake tensors "
                "(Note [as_subclass inside a capture])"
            )
            raise _watch.refused


# Note [A generator's state in the program]: the methods of a
# ``torch.Generator`` are C, so the seeding functions' watch (by their Python
# code) never saw ``torch.default_generator.set_state(s)``, its
# ``manual_seed``, or a generator the program seeds (``torch.Generator().
# manual_seed(3)``, or one passed in): a trace ran them once, and the graph
# kept none of it, nor a new generator, which the graph holds as a constant
# that goes on drawing. ``s = g.get_state(); x = torch.rand(..);
# g.set_state(s); y = torch.rand(..)`` came back with ``y`` unlike ``x``, and a
# generator seeded in the program gave new numbers from the second call on,
# with no warning (h_misc, session 13). The hook now refuses, as the C call
# starts, the methods that read or write a generator's state (CPython reports
# the bound method, so the generator is known); reading is refused too, as a
# trace would keep the state it read as a constant. Left alone: a generator
# the program makes and draws from without seeding it (each eager call starts
# it from the default seed, the graph's goes on drawing).
# Note [A storage resized in the program]: ``x.untyped_storage().resize_(0)``
# (FSDP frees a parameter's memory so) is a C method of the storage, which no
# torch-function or dispatch hook sees: the trace resized its fake's storage,
# and the caller's kept its bytes, with no warning (test_misc.py's
# test_storage_return; h_misc, session 13). The hook refuses it as the C call
# starts, and the program compiles through dynamo, which replays it.
_GENERATOR_STATE = frozenset(
    {"manual_seed", "seed", "set_state", "get_state", "set_offset", "graphsafe_set_state", "graphsafe_get_state"}
)


# Note [The state a checkpoint reads]: ``torch.utils.checkpoint`` (non-reentrant,
# ``preserve_rng_state=True``, the default) reads the generator's state in the
# forward (``torch.get_rng_state()``) to replay the forward's randomness when
# its backward recomputes. A captured program never runs that recomputation
# (its backward is the compiled one, which keeps the forward's random values),
# so the read is dead: it is let through, or every checkpointed program ran
# eagerly. Writes (``set_rng_state``, in the recomputation) are still refused.
_CHECKPOINT_FILE = torch.utils.checkpoint.__file__


def _checkpoint_reads(frame: FrameType, arg: Any) -> bool:
    """``arg`` (a generator's method) is ``get_state`` called for
    ``torch.utils.checkpoint``, directly or through ``torch.get_rng_state``."""
    if arg.__name__ != "get_state":
        return False
    f: FrameType | None = frame
    for _ in range(3):
        if f is None:
            return False
        if f.f_code.co_filename == _CHECKPOINT_FILE:
            return True
        f = f.f_back
    return False


def _after(previous: Callable[..., Any]) -> Callable[[FrameType, str, Any], None]:
    """The hook, called after the thread's own (Python) profile function."""

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        previous(frame, event, arg)
        _refuse_seeding(frame, event, arg)

    return hook


@contextlib.contextmanager
def watching_calls() -> Iterator[None]:
    """Note [Watching seeding without patching torch]. A program that caught
    the refusal and went on still runs eagerly: the call is remembered."""
    _watch.refused = None
    previous = sys.getprofile()
    if previous is not None and not callable(previous):
        with _generators_unchanged():
            yield
        return
    hook = _refuse_seeding if previous is None else _after(previous)
    _watch.profiles = (hook, previous)
    sys.setprofile(hook)
    try:
        yield
    finally:
        _watch.profiles = None
        sys.setprofile(previous)
    if _watch.refused is not None:
        raise _watch.refused


def call_unwatched(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)`` with the seeding hook off: a torch function
    the program calls (the capture's function mode sees each), whose dispatch
    through the tracer is torch's own Python and never a reseed. It is most
    of a trace's Python calls, so the hook costs a trace a little, not double
    (Note [Watching seeding without patching torch])."""
    profiles = getattr(_watch, "profiles", None)
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
