"""The tool's name and options, in a module that imports nothing heavy.

Note [Registering without importing torch's dynamo]: conveyor loads every
plugin when it builds a pipeline, whatever the pipeline's stages. This
package's modules import ``torch._dynamo``, which imports triton; the triton
backend must choose Triton's interpreter before triton's first import
(``conveyor_triton``'s Note [Choosing Triton's interpreter]), so a package
that imported triton while it registered made ``conveyor.compile(fn,
backend="triton")`` on CPU fail. Registration reads these names only; the
package's other names are imported on first use (``__init__``).
"""

STAGE = "compiled_autograd"
#: the options of ``[tool.conveyor.stages.compiled_autograd]`` (Note [A run-time
#: tool] in ``conveyor_compiled_autograd.plugin``) and their defaults: ``inline``
#: copies conveyor's backward graphs into the capture where the installed torch
#: allows it (Note [Inlined backward]); ``False`` calls them opaquely.
OPTIONS = {"inline": True}
