"""The tensor kind: one response per sample from ``postprocess``, batched and completed by LoadGen's base SUT."""
