"""The stage protocol: what a stage lowers and returns (``stage``), the plugin
hooks and manager (``hookspecs``, ``plugins``, ``builtin``: the core's own
plugin, with the reference ``eager`` backend in ``backends``), configuration
and ordering, the pipeline and the stamps of its graphs, and the
stage-facing helpers (``lowering``, ``artifacts``). Imports
``conveyor.analysis`` and ``conveyor.errors`` only.
"""
