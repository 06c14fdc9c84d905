"""LoadGen's adapter: the SUT and QSL, one batch's pre/predict/post path and its batching, completions, the LoadGen
settings and their bounds, the LoadGen logs, and the drain on a signal. It names no data kind: what a kind adds
(its input, its SUT, its records) lives in its package under ``mlharness/kinds/``."""
