"""A loaded program's Inductor entry, looked up by the key its first compile used.

Note [Inductor's entry by its stored key]: Inductor's FX graph cache key
(Note [Inductor's FX graph cache]) is a hash over the graph module (pickled)
and everything else Inductor's result depends on: the inputs' metadata, the
compile's keyword arguments, Inductor's configuration, torch's source, the
system (compiler, devices), global settings (deterministic algorithms,
matmul precision, the default dtype), custom passes. Computing it pickles the
whole graph, and its debug lines pickle each part once more: a training
step's forward and backward graphs cost about 1.5 of a warm first call's
profiled seconds more than ``torch.compile(m)``'s one AOTAutograd key,
whose entry names its forward's and backward's FX keys and loads them by
those keys (``FxGraphCacheLoadable.load``).

A program loaded from conveyor's disk cache does the same:

* **stored**: Inductor's key of the first process's compile
  (``compiled._fx_graph_cache_key``, set on a hit or a miss) and the
  *context*: Inductor's own hash of the same details with the graph left
  out (``FxGraphHashDetails`` made with the graph, for what Inductor derives
  from it, then its ``gm`` set to ``None``), computed just before the
  compile, in its scope and configuration, on the graph Inductor keys.
* **loaded**: the context computed again, now with no graph at all
  (``FxGraphHashDetails(None, ...)``). Equal contexts and conveyor's own
  disk key (which keys the graph: the entry stores the very graph the first
  process handed Inductor, Note [Storing Inductor programs]) say that
  Inductor would compute the stored key again; so the entry is looked up by
  it (``FxGraphCache.load_with_key``, as ``compile_fx_inner`` and
  AOTAutograd's cache call it, its guards evaluated as there), and given
  the same ``post_compile`` as ``compile_fx_inner`` gives a hit.

Whatever Inductor derives from the graph that differs from what it derives
from no graph (the kernel source of user-defined Triton kernels, a thread
count for C++ code made only by factory ops, a CUDA graph annotation) makes
the two contexts differ: such a program takes the full path. So does any
other difference (another Inductor configuration, torch build, compiler,
global setting), a torch without one of the internals used (probed:
:func:`api`), the cache off or remote, and an entry that is gone or whose
guards fail: then the program compiles through ``compile_fx_inner`` as
before, which computes the key itself (a lookup missed here and there
counts two misses in Inductor's counters). What runs is always Inductor's
own entry for this graph's key, never a conveyor artifact.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EntryKey:
    """Where Inductor's FX graph cache keeps one graph's program.

    :ivar key: Inductor's key of the graph, as its compile computed it.
    :ivar context: Inductor's hash of the key's details without the graph.
    """

    key: str
    context: str


@dataclass(frozen=True)
class EntryApi:
    """The Inductor internals this module uses (Note [Inductor's entry by its stored key])."""

    fx_graph_cache: Any  # torch._inductor.codecache.FxGraphCache
    hash_details: Any  # torch._inductor.codecache.FxGraphHashDetails
    pickler: Any  # torch._inductor.codecache.FxGraphCachePickler
    constants: Any  # torch._inductor.output_code.CompiledFxGraphConstantsWithGm
    inputs_to_check: Any  # torch._inductor.compile_fx.get_input_idxs_to_check
    boxed_bool: Any  # torch._inductor.utils.BoxedBool
    remote: Any  # torch._inductor.utils.should_use_remote_fx_graph_cache
    config: Any  # torch._inductor.config
    aot_compilation: Any  # a callable: whether Inductor compiles ahead of time (V.aot_compilation)
    clear_kernels: Any  # torch._inductor.async_compile.CompiledTritonKernels.cache_clear
    no_modes: Any  # torch.utils._python_dispatch._disable_current_modes


@functools.cache
def api() -> EntryApi | None:
    """What :func:`stored_key` and :func:`load` use, or ``None`` when this
    torch lacks one of them (then every loaded program takes the full path)."""
    try:
        import torch._inductor.config as config
        from torch._inductor.async_compile import CompiledTritonKernels
        from torch._inductor.codecache import FxGraphCache, FxGraphCachePickler, FxGraphHashDetails
        from torch._inductor.compile_fx import get_input_idxs_to_check
        from torch._inductor.output_code import CompiledFxGraphConstantsWithGm
        from torch._inductor.utils import BoxedBool, should_use_remote_fx_graph_cache
        from torch._inductor.virtualized import V
        from torch.utils._python_dispatch import _disable_current_modes
    except ImportError as exc:
        log.debug("loaded programs take the full path: %s", exc)
        return None
    needed = (FxGraphCache, "load_with_key"), (FxGraphCache, "_get_tmp_dir_for_key"), (FxGraphCachePickler, "get_key")
    if not all(callable(getattr(owner, name, None)) for owner, name in needed):
        log.debug("loaded programs take the full path: FxGraphCache lacks what they need")
        return None
    return EntryApi(
        FxGraphCache,
        FxGraphHashDetails,
        FxGraphCachePickler,
        CompiledFxGraphConstantsWithGm,
        get_input_idxs_to_check,
        BoxedBool,
        should_use_remote_fx_graph_cache,
        config,
        lambda: bool(V.aot_compilation),
        CompiledTritonKernels.cache_clear,
        _disable_current_modes,
    )


def _kwargs(found: EntryApi, is_backward: bool) -> dict[str, Any]:
    """The keyword arguments ``compile_fx_inner`` hands its cache when the
    backend passes ``is_backward`` (its defaults, and ``cudagraphs`` from
    the configuration)."""
    return {
        "cudagraphs": found.boxed_bool(found.config.triton.cudagraphs),
        "static_input_idxs": (),
        "is_backward": is_backward,
        "graph_id": None,
        "cpp_wrapper": False,
        "fx_wrapper": False,
        "is_inference": False,
        "boxed_forward_device_index": None,
        "layout_opt": None,
        "extern_node_serializer": None,
    }


def _context(found: EntryApi, gm: torch.fx.GraphModule | None, inputs: Sequence[Any], kwargs: dict[str, Any]) -> str:
    details = found.hash_details(gm, inputs, kwargs, found.inputs_to_check(inputs, ()))
    if details.user_defined_triton_source:
        raise ValueError("the graph calls user-defined Triton kernels")
    details.gm = None
    return str(found.pickler(gm).get_key(details))


def _usable(found: EntryApi) -> bool:
    """Whether ``compile_fx_inner`` would look a graph up in the local cache now."""
    config = found.config
    return bool(
        config.fx_graph_cache
        and not config.force_disable_caches
        and not config.save_args
        and not found.remote()
        and not found.aot_compilation()
        and not torch._functorch.config.bundled_autograd_cache
    )


def context_of(gm: torch.fx.GraphModule, inputs: Sequence[Any], is_backward: bool) -> str | None:
    """Inductor's hash of the details of ``gm``'s key but the graph, or
    ``None`` when it cannot be computed. Called in the compile's scope and
    configuration, on the graph Inductor is about to key (before its passes
    rewrite it)."""
    found = api()
    if found is None:
        return None
    try:
        return _context(found, gm, inputs, _kwargs(found, is_backward))
    except Exception as exc:  # noqa: BLE001 - an unkeyable context only means the full path next time
        log.debug("no stored key: the context cannot be computed: %s: %s", type(exc).__name__, exc)
        return None


def stored_key(compiled: Any, context: str | None) -> EntryKey | None:
    """The entry ``compiled`` (``compile_fx_inner``'s result for a graph
    whose :func:`context_of` was ``context``) is kept under, to be stored
    with the program; ``None`` when it has no key (the cache was off or
    bypassed) or no context."""
    key = getattr(compiled, "_fx_graph_cache_key", None)
    if not isinstance(key, str) or context is None:
        return None
    return EntryKey(key, context)


def load(
    entry: EntryKey, graph: Callable[[], torch.fx.GraphModule], inputs: Sequence[Any], is_backward: bool
) -> Any | None:
    """Inductor's program under ``entry``'s key for the stored graph
    (``graph()``) on fake ``inputs``, ready to run, or ``None`` (the caller
    compiles it) (Note [Inductor's entry by its stored key]). Called in the
    compile's scope and configuration. The graph is made only if Inductor
    reads an attribute of it: the values of frozen parameters, which a graph
    compiled without Inductor's freezing has none of."""
    found = api()
    if found is None or not _usable(found):
        return None
    kwargs = _kwargs(found, is_backward)
    try:
        context = _context(found, None, inputs, kwargs)
    except Exception as exc:  # noqa: BLE001 - the full path computes Inductor's own key
        log.debug("full path: the context cannot be computed: %s: %s", type(exc).__name__, exc)
        return None
    if context != entry.context:
        log.debug("full path: Inductor's context changed since the program was stored")
        return None
    if not os.path.isdir(found.fx_graph_cache._get_tmp_dir_for_key(entry.key)):
        log.debug("full path: Inductor's cache has no entry %s", entry.key)
        return None
    constants = found.constants(_Attributes(graph))
    with contextlib.ExitStack() as stack:
        stack.enter_context(found.no_modes())
        found.clear_kernels()
        compiled, _ = found.fx_graph_cache.load_with_key(
            entry.key, [], inputs, True, None, is_backward=is_backward, constants=constants
        )
        if compiled is None:
            return None
        compiled._fx_graph_cache_key = entry.key
        if hasattr(compiled, "compile_region_name"):
            compiled.compile_region_name = None  # as compile_fx_inner's hit
        compiled.post_compile(inputs, constants, kwargs)
        policy = getattr(found.config, "cudagraph_policy", None)
        if policy is not None:
            compiled = policy.wrap_output(compiled)
    return compiled


class _Attributes:
    """The attributes of the graph module ``graph()`` makes, made on the
    first one read (``CompiledFxGraphConstantsWithGm`` reads only frozen
    parameters off the module it is given)."""

    __slots__ = ("_graph",)

    def __init__(self, graph: Callable[[], torch.fx.GraphModule]) -> None:
        self._graph = graph

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph(), name)
