"""conveyor-autograd: the stage that makes compiled programs trainable."""

from conveyor_autograd.__about__ import __version__
from conveyor_autograd.joint import JointGraph, trace_joint
from conveyor_autograd.layout import AutogradLayout, InputIdx, OutputIdx, SavedIdx
from conveyor_autograd.min_cut import min_cut
from conveyor_autograd.partition import Split, save_eager, split
from conveyor_autograd.runtime import BackwardGraph, backward_graph_of, function_grads
from conveyor_autograd.stage import PARTITIONERS, Autograd

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
