"""Id lists of varying length per sample, batched as values and offsets, maybe in time order (``input.py``)."""
