"""Session responses: a float response cast to an integer dtype is refused when it holds NaN or infinity, naming
the sample, instead of becoming arbitrary integers that are scored (a NaN image turned into black pixels)."""

from __future__ import annotations

import numpy as np
import pytest

from mlharness.errors import HookError
from tests.test_sut import make_pipeline


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_float_image_is_refused_naming_the_sample(bad):
    images = np.full((2, 4, 4, 3), 128.0, dtype=np.float32)
    images[1, 2, 3, 0] = bad
    p = make_pipeline(2, postprocess=lambda ctx, outputs, indices: images, dtype=np.uint8)
    with pytest.raises(HookError, match=r"response of sample 7 holds 1 non-finite values") as e:
        p.respond([images], 2, np.array([3, 7]))
    assert "postprocess" in str(e.value) and "uint8" in str(e.value)


def test_list_of_float_responses_is_checked_too():
    p = make_pipeline(2, dtype=np.int32)
    with pytest.raises(HookError, match=r"response at position 1 of the batch holds 2 non-finite"):
        p.encode([np.zeros(3), np.array([1.0, np.nan, np.inf])], 2)


def test_finite_floats_and_float_responses_are_encoded_as_before():
    p = make_pipeline(2, dtype=np.uint8)
    buf, offsets = p.encode(np.array([[1.0, 255.0], [0.0, 7.0]]), 2)
    assert buf.tolist() == [1, 255, 0, 7] and offsets.tolist() == [0, 2, 4]
    floats = make_pipeline(1, dtype=np.float32)  # a float response may be any finite number, not NaN
    buf, _ = floats.encode(np.array([[-1e30]]), 1)
    assert np.frombuffer(buf.tobytes(), np.float32).tolist() == [np.float32(-1e30)]
    with pytest.raises(HookError, match=r"holds 1 non-finite values \(NaN or infinity\), refused as a float32"):
        floats.encode(np.array([[np.nan]]), 1)
