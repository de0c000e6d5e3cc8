"""conveyor-dedupe: the same tensor passed in several positions becomes one graph input."""

from conveyor_dedupe.__about__ import __version__
from conveyor_dedupe.mapping import DedupeMap, InnerIdx, OuterIdx, first_positions
from conveyor_dedupe.stage import Dedupe

__all__ = ["Dedupe", "DedupeMap", "InnerIdx", "OuterIdx", "__version__", "first_positions"]
