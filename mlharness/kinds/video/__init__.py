"""The video kind: one video per sample, encoded like a tensor (frames x height x width x 3) at a frame rate."""
