"""KiTS19 / 3D U-Net arithmetic against hand-computed values: the Gaussian importance map, window positions, the
reference's pad/crop rules, affines, DICE and its aggregation, and the sliding window's result and memory."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.kits19 import dataset as kits19
from mlharness.tasks.kits19 import sliding_window
from mlharness.tasks.kits19.metric import accuracy_text, dice_scores, summarize


# -- Gaussian importance map ---------------------------------------------------------------------------------
def test_gaussian_map_values():
    g = sliding_window.gaussian_importance_map()
    assert g.shape == (128, 128, 128) and g.dtype == np.float32
    # 1-D Gaussian with std 16 centred at 63.5: g(n) = exp(-(n - 63.5)^2 / 512); the map is the cube root of the
    # product of three, divided by its maximum g(63)^3 -> exactly 1 on the 8 central voxels.
    assert g.max() == 1.0
    assert np.argwhere(g == 1.0).tolist() == [[i, j, k] for i in (63, 64) for j in (63, 64) for k in (63, 64)]
    # a corner: cbrt(g(0)^3) / g(63) = exp(-(63.5^2 - 0.5^2) / 512) = exp(-7.875)
    assert g[0, 0, 0] == pytest.approx(math.exp(-7.875), rel=1e-6)
    # the middle of a face: cbrt(g(0) g(63)^2) / g(63) = exp(-7.875 / 3)
    assert g[0, 63, 63] == pytest.approx(math.exp(-2.625), rel=1e-6)
    assert g[127, 64, 63] == g[0, 63, 63]
    for axis in range(3):  # symmetric along every axis
        assert np.array_equal(g, np.flip(g, axis))
    assert not g.flags.writeable  # one shared, cached map


def test_importance_map_modes():
    assert np.array_equal(sliding_window.importance_map("constant", (4, 4, 4)), np.ones((4, 4, 4), np.float32))
    with pytest.raises(ValueError, match="window weighting"):
        sliding_window.importance_map("cosine")


# -- window positions --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("size", "starts"), [
    (128, [0]), (192, [0, 64]), (256, [0, 64, 128]), (320, [0, 64, 128, 192]),
    (129, [0]), (191, [0]), (193, [0, 64]), (127, []),
])
def test_window_starts(size, starts):
    assert sliding_window.window_starts(size, 128, 64) == starts


def test_window_positions_order_and_coverage():
    assert sliding_window.strides_for((128, 128, 128), 0.5) == (64, 64, 64)
    assert sliding_window.strides_for((128, 96, 128), 0.25) == (96, 72, 96)
    pos = sliding_window.window_positions((128, 192, 256))
    assert pos == [(0, j, k) for j in (0, 64) for k in (0, 64, 128)]  # last axis fastest, like the reference
    for shape in [(129, 128, 128), (128, 160, 128), (127, 128, 128)]:  # not tiled: refused, never NaN labels
        with pytest.raises(ValueError, match="does not tile"):
            sliding_window.window_positions(shape)


# -- the reference's pre-processing arithmetic ----------------------------------------------------------------
def test_min_shape_padding():
    assert kits19.min_shape_padding((100, 128, 200)) == [(14, 14), (0, 0), (0, 0)]
    assert kits19.min_shape_padding((101, 127, 1)) == [(13, 14), (0, 1), (63, 64)]  # smaller half first


@pytest.mark.parametrize(("size", "crop", "pad", "final"), [
    (128, (0, 128), (0, 0), 128),     # exact multiple: untouched
    (129, (0, 128), (0, 0), 128),     # 1 above: cropped at the end
    (130, (1, 129), (0, 0), 128),     # 2 above: one voxel from each side
    (150, (11, 139), (0, 0), 128),    # 22 above: 11 + 11
    (159, (15, 143), (0, 0), 128),    # 31 above (< half a stride): 15 at the start, 16 at the end
    (160, (0, 160), (16, 16), 192),   # 32 above: padded to the next multiple
    (161, (0, 161), (15, 16), 192),   # padding's smaller half first
    (191, (0, 191), (0, 1), 192),
    (192, (0, 192), (0, 0), 192),
    (193, (0, 192), (0, 0), 192),
    (256, (0, 256), (0, 0), 256),
])
def test_window_crop_and_padding(size, crop, pad, final):
    (got_crop,) = kits19.window_crop((size,), (128,))
    assert got_crop == crop
    kept = got_crop[1] - got_crop[0]
    (got_pad,) = kits19.window_padding((kept,), (128,))
    assert got_pad == pad
    assert kept + sum(got_pad) == final


def test_window_padding_below_the_window():
    # the reference adds a whole stride when the next multiple is still below the window
    assert kits19.window_padding((60, 100, 64), (128, 128, 128)) == [(34, 34), (14, 14), (32, 32)]


def test_preprocess_volumes_without_resampling():
    image = np.full((100, 150, 161), 200.0, dtype=np.float32)
    image[0, 20, 0] = 5000.0  # clipped to 304
    image[-1, 100, -1] = -1000.0  # clipped to -79
    label = np.ones(image.shape, dtype=np.uint8)
    out, lab, zoom = kits19.preprocess_volumes(image, label, spacing=[1.6, 1.2, 1.2])
    assert np.array_equal(zoom, [1.0, 1.0, 1.0])
    assert out.shape == lab.shape == (1, 128, 128, 192) and out.dtype == np.float32 and lab.dtype == np.uint8
    value = (np.float32(200.0) - np.float32(101.0)) / np.float32(76.9)
    # z: 100 -> edge-padded 14 + 14; y: 150 -> cropped [11, 139); x: 161 -> constant-padded 15 + 16 with -2.2
    assert out[0, 0, 5, 20] == value and out[0, 127, 5, 20] == value  # edge padding repeats the border
    assert np.all(out[0, :, :, :15] == np.float32(-2.2)) and np.all(out[0, :, :, -16:] == np.float32(-2.2))
    assert np.all(lab[0, :, :, :15] == 0) and np.all(lab[0, :, :, 15:-16] == 1)
    # (0, 20, 0) moves to (14, 9, 15): 14 padded slices before it, 11 rows cropped, 15 columns padded
    assert out[0, 14, 9, 15] == (np.float32(304.0) - np.float32(101.0)) / np.float32(76.9)
    assert out[0, 0, 9, 15] == out[0, 14, 9, 15]  # z edge padding copied the clipped voxel
    assert out[0, 113, 89, 175] == (np.float32(-79.0) - np.float32(101.0)) / np.float32(76.9)


def test_preprocess_volumes_resamples_image_linear_label_nearest():
    image = np.zeros((10, 10, 10), dtype=np.float32)
    image[:, :, 5:] = 100.0
    label = (image > 0).astype(np.uint8)
    out, lab, zoom = kits19.preprocess_volumes(image, label, spacing=[3.2, 1.2, 0.6])
    assert zoom.tolist() == [2.0, 1.0, 0.5]
    assert out.shape == (1, 128, 128, 128)
    assert set(np.unique(lab).tolist()) == {0, 1}  # nearest neighbour: no new label values
    # linear interpolation leaves intermediate intensities at the step; nearest keeps a sharp edge
    inner = out[0, 64, 64, 59:69]
    assert np.any((inner > inner.min()) & (inner < inner.max()))


def test_reshaped_affine():
    kits_like = np.array([[0, 0, -0.919, 10], [0, -0.919, 0, 20], [-5.0, 0, 0, 30], [0, 0, 0, 1]])
    assert kits19.reshaped_affine(kits_like).tolist() == [
        [0, 0, -1.2, 10], [0, -1.2, 0, 20], [-1.6, 0, 0, 30], [0, 0, 0, 1]]
    assert np.diag(kits19.reshaped_affine(np.diag([2.0, 0.7, 0.8, 1.0]))).tolist() == [1.6, 1.2, 1.2, 1.0]
    oblique = np.array([[0.7, 0.7, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])
    with pytest.raises(DatasetError, match="axis-aligned"):
        kits19.reshaped_affine(oblique)


def test_official_case_list():
    assert len(kits19.INFERENCE_CASES) == 43 == len(set(kits19.INFERENCE_CASES))
    assert kits19.INFERENCE_CASES[0] == "case_00000" and kits19.INFERENCE_CASES[-1] == "case_00400"


# -- DICE ------------------------------------------------------------------------------------------------------
def test_dice_perfect_and_disjoint():
    gt = np.zeros((4, 4, 4), dtype=np.uint8)
    gt[:2] = 1
    gt[0, 0, :2] = 2
    assert dice_scores(gt.copy(), gt) == (1.0, 1.0)
    empty = np.zeros_like(gt)
    kidney, tumor = dice_scores(empty, gt)  # nothing predicted: only the smoothing term remains
    assert kidney == pytest.approx(1e-6 / (30 + 1e-6)) and tumor == pytest.approx(1e-6 / (2 + 1e-6))


def test_dice_partial_overlap_hand_computed():
    gt = np.zeros((2, 2, 4), dtype=np.uint8)
    pred = np.zeros_like(gt)
    gt[0, 0, :] = 1          # 4 kidney voxels
    pred[0, 0, 2:] = 1       # 2 of them
    pred[1, 1, :2] = 1       # + 2 false positives
    gt[1, 0, 0] = 2          # tumor absent from the prediction
    kidney, tumor = dice_scores(pred, gt)
    assert kidney == (2 * 2 + 1e-6) / (4 + 4 + 1e-6)
    assert tumor == 1e-6 / (1 + 1e-6)


def test_dice_class_absent_from_both_is_one():
    # the reference's smoothing (1e-6 on both sides) scores a class missing from prediction and truth as 1, not NaN
    gt = np.zeros((3, 3, 3), dtype=np.uint8)
    gt[1, 1, 1] = 1
    assert dice_scores(gt.copy(), gt) == (1.0, 1.0)


def test_dice_shape_mismatch():
    with pytest.raises(AccuracyError, match="differ in shape"):
        dice_scores(np.zeros((2, 2, 2), np.uint8), np.zeros((2, 2, 3), np.uint8))


def test_summary_counts_nan_as_zero_and_formats_like_the_reference():
    rows = [("case_a", float("nan"), 0.5), ("case_b", 1.0, 1.0), ("case_c", 0.8, 0.6)]
    s = summarize(rows)
    # composite per case: NaN (a crash) -> 0, 1.0, 0.7; kidney: NaN -> 0
    assert s["composite"] == pytest.approx((0 + 1.0 + 0.7) / 3)
    assert s["kidney"] == pytest.approx((0 + 1.0 + 0.8) / 3)
    assert s["tumor"] == pytest.approx((0.5 + 1.0 + 0.6) / 3)
    assert accuracy_text({"composite": 0.861704, "kidney": 0.93466, "tumor": 0.78874}) == \
        "Accuracy: mean = 0.86170, kidney = 0.9347, tumor = 0.7887\n"


# -- sliding window ----------------------------------------------------------------------------------------
_RAMP = np.linspace(-1.0, 1.0, 128, dtype=np.float32)
_RAMP3 = _RAMP[:, None, None] + _RAMP[None, :, None] + _RAMP[None, None, :]


def _toy_model(patches: list[np.ndarray]) -> list[np.ndarray]:
    """Logits that depend on the position in the patch along every axis, so the result depends on how the
    overlapping windows are weighted."""
    x = patches[0]
    out = np.empty((x.shape[0], 3, *x.shape[2:]), dtype=np.float32)
    out[:, 0] = 0.2
    out[:, 1] = x[:, 0] * _RAMP3
    out[:, 2] = x[:, 0] * _RAMP3[::-1, ::-1, ::-1] - 0.1
    return [out]


def _naive(run, volume: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The reference's loop: one window at a time, three-channel norm map, full-volume division and argmax."""
    result = np.zeros((3, *volume.shape[1:]), np.float32)
    norm = np.zeros_like(result)
    for i, j, k in sliding_window.window_positions(volume.shape[1:]):
        window = (slice(None), slice(i, i + 128), slice(j, j + 128), slice(k, k + 128))
        result[window] += run([volume[window][np.newaxis]])[0][0] * weights
        norm[window] += weights
    return np.argmax(result / norm, axis=0).astype(np.uint8)


@pytest.mark.parametrize("mode", ["gaussian", "constant"])
def test_sliding_window_matches_the_reference_loop_bit_for_bit(mode):
    rng = np.random.default_rng(0)
    volume = rng.normal(size=(1, 128, 192, 192)).astype(np.float32)
    expected = _naive(_toy_model, volume, sliding_window.importance_map(mode))
    for batch in (1, 3, 8):
        got = sliding_window.segment_volume(_toy_model, volume, batch=batch, mode=mode)
        assert got.dtype == np.uint8 and got.shape == (128, 192, 192)
        assert np.array_equal(got, expected)
    out = sliding_window.predict_segmentation(_toy_model, volume[np.newaxis], batch=2, mode=mode)
    assert out.shape == (1, 128, 192, 192) and np.array_equal(out[0], expected)


def test_sliding_window_weighting_changes_the_answer():
    rng = np.random.default_rng(1)
    volume = rng.normal(size=(1, 128, 192, 128)).astype(np.float32)
    gauss = sliding_window.segment_volume(_toy_model, volume)
    const = sliding_window.segment_volume(_toy_model, volume, mode="constant")
    assert not np.array_equal(gauss, const)
    # a single window (128^3) is not averaged with anything: the weighting cannot matter there
    single = volume[:, :, :128]
    assert np.array_equal(sliding_window.segment_volume(_toy_model, single),
                          sliding_window.segment_volume(_toy_model, single, mode="constant"))


def test_sliding_window_rejects_bad_model_output():
    volume = np.zeros((1, 128, 128, 128), np.float32)
    with pytest.raises(ValueError, match="logits of shape"):
        sliding_window.segment_volume(lambda xs: [np.zeros((1, 3, 64, 64, 64), np.float32)], volume)
    with pytest.raises(ValueError, match="expected 3"):
        sliding_window.segment_volume(lambda xs: [np.zeros((1, 2, 128, 128, 128), np.float32)], volume, classes=3)
    with pytest.raises(ValueError, match="one .channels"):
        sliding_window.segment_volume(_toy_model, volume[0])


def test_options_from_attributes():
    assert sliding_window.options_from({}) == {"roi_shape": (128, 128, 128), "overlap": 0.5, "batch": 1,
                                               "mode": "gaussian"}
    assert sliding_window.options_from({"patch_batch": 4, "window_weighting": "constant"})["batch"] == 4
    with pytest.raises(ValueError, match="window_weighting"):
        sliding_window.options_from({"window_weighting": "uniform"})


def test_sliding_window_memory_is_bounded():
    """Peak allocations stay at the two accumulators plus patch-sized buffers: no whole-volume temporaries."""
    shape = (128, 192, 192)
    volume = np.zeros((1, *shape), np.float32)
    voxels = int(np.prod(shape))
    patch = 128**3

    def model(patches: list[np.ndarray]) -> list[np.ndarray]:
        return [np.full((patches[0].shape[0], 3, 128, 128, 128), 0.5, np.float32)]

    sliding_window.gaussian_importance_map()  # cached before measuring
    tracemalloc.start()
    try:
        sliding_window.segment_volume(model, volume, batch=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # float32 result (3 channels) + float32 norm + uint8 labels + 2 input patches + 2 model outputs + argmax slab
    bound = 4 * 3 * voxels + 4 * voxels + voxels + 2 * 4 * patch + 2 * 4 * 3 * patch + 8 * 16 * 192 * 192
    assert 4 * 4 * voxels <= peak <= 1.05 * bound, (peak, bound)  # the accumulators are seen: numpy is traced
