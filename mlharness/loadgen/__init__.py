"""What touches LoadGen: the SUT and QSL, the pre/predict/post pipeline and its batching, token reporting and
completions, the LoadGen settings and their bounds, the LoadGen logs, and the drain on a signal."""
