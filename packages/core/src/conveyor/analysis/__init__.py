"""Facts about ops and programs: which ops view, write, alias or must run
(``schema``), memory layouts (``overlap``), which inputs share storage
(``signature``: one per call), grad-mode regions and gradient cuts (``grad_regions``),
functional runs and the program record (``program``). Imports only
``conveyor.errors``.
"""
