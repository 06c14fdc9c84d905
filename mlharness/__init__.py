"""mlharness: benchmark any ML model under the MLPerf Inference rules."""

__version__ = "0.1.0"
