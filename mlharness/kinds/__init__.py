"""The data kinds, one package each, holding what is particular to that kind: how its input is read and checked,
how its SUT completes LoadGen's samples, how the run is calibrated, and how its records are reported.

- ``tensor/``: one response per sample, completed by LoadGen's base SUT (most benchmarks);
- ``tokens/``: generated token streams (the token SUT, its calibration, TTFT/TPOT and token throughput);
- ``video/``: one video per sample, its frames' shape and rate checked and handed to the metric;
- ``sessions/``: multi-turn sessions, one per sample (the session SUT, input, calibration, records and plots);
- ``pipeline/``: a system of stages, one item per sample (the pipeline SUT, input, calibration, records, plots);
- ``chat/``: chat prompts with images, the input of a token stream;
- ``jagged/``: id lists of varying length batched as values and offsets, maybe played in time order;
- ``graph/``: a seed node per sample, its neighbourhood sampled on the timed path.

Each package's ``kind.py`` holds its row, a :class:`~mlharness.kinds.base.Kind` (the interface: the input role,
the response role, the report section); :mod:`mlharness.kinds.registry` finds the rows by name, built in or added
by another package's entry point, and the run, the plan and the report ask there. The LoadGen adapter
(``mlharness/loadgen/``) names none of them. Importing this package imports no kind."""
