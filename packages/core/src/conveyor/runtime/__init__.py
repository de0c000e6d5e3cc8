"""Per call and across processes: the call key, entry guards, automatic dynamic
shapes, the disk cache and its key, compiling a captured program (with
tensor subclasses) through the pipeline. Imports every layer below.
"""
