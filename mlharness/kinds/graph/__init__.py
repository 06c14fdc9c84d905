"""A seed node per sample: the graph input (``input.py``: the graph opened once, memory-mapped) and the
per-seed neighbour sampler (``sampler.py``)."""
