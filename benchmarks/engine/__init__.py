"""The measuring engine: load generation, SSE parsing and metric math.

Nothing here imports Django, so the engine can be tested and reused on its own
(for example from a notebook or a benchmark script).
"""
