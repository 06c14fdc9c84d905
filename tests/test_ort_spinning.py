"""ONNX Runtime's pool threads spin only when they leave a core free, unless the manifest says otherwise."""

from __future__ import annotations

import os

import pytest

from mlharness.predictors import onnxruntime as ort_predictor

CORES = len(os.sched_getaffinity(0))


@pytest.mark.parametrize("opts,spins", [
    ({}, False),  # ONNX Runtime's default: a thread per core
    ({"intra_op_num_threads": CORES}, False),
    ({"intra_op_num_threads": CORES + 2}, False),
    ({"allow_spinning": True}, True),
    ({"intra_op_num_threads": CORES, "allow_spinning": 1}, True),
])
def test_spinning_default_and_option(opts, spins):
    assert ort_predictor.allow_spinning(opts) is spins


@pytest.mark.skipif(CORES < 2, reason="needs a spare core")
def test_threads_that_leave_a_core_free_spin():
    assert ort_predictor.allow_spinning({"intra_op_num_threads": CORES - 1}) is True
