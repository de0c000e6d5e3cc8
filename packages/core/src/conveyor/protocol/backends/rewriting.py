"""Note [One copy for the rewrites]: the eager backend rewrites the graph it
is handed (Note [Transpose pairs], Note [Linear calls], Note [Kept
dimensions], Note [Movement chains], Note [Copies around a stack]). That
graph is the request's: it is stamped, shown by ``last_graphs`` and may be
lowered again, so no rewrite may change it. Each rewrite used to make a
deep copy of the graph it was given (``Graph.__deepcopy__``, about 6 ms on
MobileNetV2's forward) and a graph module around the copy. They now share
one copy, made when a rewrite first has something to change:

* :class:`Rewriting` holds the graph the rewrites read: the request's own
  until a rewrite asks for a graph to change (:meth:`Rewriting.writable`),
  then one deep copy of it, which that rewrite and every later one change
  in place;
* :func:`rewritten` runs rewrites in order on one :class:`Rewriting` and
  makes one graph module at the end, or hands back the module it was given
  when none changed anything.

The contract of a rewrite (a callable taking the :class:`Rewriting`):

* it decides what to change from ``rewriting.graph`` alone, naming the
  nodes to change by ``Node.name``, and changes nothing there;
* only when it has something to change does it call ``writable()``, and it
  changes the graph that returns in place, finding its nodes by name (a
  deep copy keeps every node's name; before the first copy the two graphs'
  nodes are different objects, after it the same);
* it leaves a well-formed graph: the next rewrite reads it.

A rewrite that changes nothing costs no copy; a chain of rewrites costs at
most one, and the graph they produce is the one the chain of copies
produced, node for node.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch.fx
from torch.fx._lazy_graph_module import _make_graph_module


class Rewriting:
    """The graph a chain of rewrites works on (Note [One copy for the rewrites])."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.module = gm
        #: the graph to read: ``gm``'s own until :meth:`writable` is first called, then the copy
        self.graph: torch.fx.Graph = gm.graph
        self.copied = False

    def writable(self) -> torch.fx.Graph:
        """The graph a rewrite changes in place: a deep copy of the module's
        graph, made on the first call and returned by every later one."""
        if not self.copied:
            self.graph = copy.deepcopy(self.graph)
            self.copied = True
        return self.graph


#: a rewrite of the graph a :class:`Rewriting` holds, keeping its contract
Rewrite = Callable[[Rewriting], None]


def rewritten(gm: torch.fx.GraphModule, *rewrites: Rewrite) -> torch.fx.GraphModule:
    """``gm`` after ``rewrites``, in order: a new graph module (lazy where
    torch's lazy graph modules are switched on: Note [Rewritten graphs
    generate code once]) when one changed the graph, else ``gm`` itself."""
    rewriting = Rewriting(gm)
    for rewrite in rewrites:
        rewrite(rewriting)
    return _make_graph_module(gm, rewriting.graph) if rewriting.copied else gm
