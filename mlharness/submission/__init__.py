"""Submission-style result trees: the runs a benchmark needs (accuracy, performance, compliance audits), a
package in the MLPerf Inference submission layout, and a checker for that layout.

- :mod:`~mlharness.submission.orchestrate`: ``mlharness submission run`` (one LoadGen test per process);
- :mod:`~mlharness.submission.compliance`: TEST01 / TEST04 / TEST05 verification;
- :mod:`~mlharness.submission.package`: ``mlharness submission package`` (truncated accuracy logs, src, systems);
- :mod:`~mlharness.submission.checker`: ``mlharness submission check``;
- :mod:`~mlharness.submission.rules`: the facts of the rules the checker enforces, per round
  (:mod:`mlharness.rounds` holds each round's seeds).
"""
