"""mlharness: benchmark any ML model under the MLPerf Inference rules."""

__version__ = "0.1.0"

from mlharness import moved as _moved

_moved.install()  # `import mlharness.pipeline.stage` and the like, of hooks written before the kinds' packages
