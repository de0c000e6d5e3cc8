"""Capture: tracing a user's function or module into a graph, with the Python
objects, reachable state, hooks, tensor subclasses and custom Functions
around it, and what refuses to be captured. Imports the layers below
(analysis, protocol), never the run time.
"""
