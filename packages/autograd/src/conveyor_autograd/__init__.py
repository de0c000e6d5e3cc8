"""conveyor-autograd: the stage that makes compiled programs trainable.

The names below are imported on first use (PEP 562): registering the stage
imports none of them (Note [Stage implementations imported when they run]
in ``conveyor.protocol.lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.stage_api import lazy_names

from conveyor_autograd.__about__ import __version__

if TYPE_CHECKING:
    from conveyor_autograd.joint import JointGraph, trace_joint
    from conveyor_autograd.layout import AutogradLayout, InputIdx, OutputIdx, SavedIdx
    from conveyor_autograd.min_cut import min_cut
    from conveyor_autograd.partition import Split, save_eager, split
    from conveyor_autograd.runtime import BackwardGraph, backward_graph_of, function_grads
    from conveyor_autograd.stage import PARTITIONERS, Autograd

_WHERE = {
    "JointGraph": "conveyor_autograd.joint",
    "trace_joint": "conveyor_autograd.joint",
    "AutogradLayout": "conveyor_autograd.layout",
    "InputIdx": "conveyor_autograd.layout",
    "OutputIdx": "conveyor_autograd.layout",
    "SavedIdx": "conveyor_autograd.layout",
    "min_cut": "conveyor_autograd.min_cut",
    "Split": "conveyor_autograd.partition",
    "save_eager": "conveyor_autograd.partition",
    "split": "conveyor_autograd.partition",
    "BackwardGraph": "conveyor_autograd.runtime",
    "backward_graph_of": "conveyor_autograd.runtime",
    "function_grads": "conveyor_autograd.runtime",
    "PARTITIONERS": "conveyor_autograd.stage",
    "Autograd": "conveyor_autograd.stage",
}

__getattr__, __dir__ = lazy_names(globals(), _WHERE)

__all__ = [
    "PARTITIONERS",
    "Autograd",
    "AutogradLayout",
    "BackwardGraph",
    "InputIdx",
    "JointGraph",
    "OutputIdx",
    "SavedIdx",
    "Split",
    "__version__",
    "backward_graph_of",
    "function_grads",
    "min_cut",
    "save_eager",
    "split",
    "trace_joint",
]
