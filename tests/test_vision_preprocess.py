"""The reference-exact ImageNet pre-processing against slow, independent numpy re-implementations of every step.

The oracles below are written from the algorithms (OpenCV's INTER_AREA in its three regimes, Pillow's two-pass
fixed-point bilinear resampler, the reference's size and crop formulas, libjpeg's CMYK handling in OpenCV) and
call neither OpenCV's resize nor Pillow's: the helpers must equal them exactly at the uint8 stage and within 1e-5
once in float32. The images cover odd sizes, portrait and landscape, down- and up-scaling, OpenCV's integer-ratio
fast path (2x rounds half up, 3x rounds half to even), grayscale and CMYK JPEGs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import PIL
import pytest
from PIL import Image

from mlharness.errors import DatasetError
from mlharness.tasks.imagenet import preprocess as vision

# (name, height, width, JPEG mode)
IMAGES = [
    ("landscape_odd", 333, 517, "RGB"),
    ("portrait_odd", 601, 289, "RGB"),
    ("upscaled", 151, 203, "RGB"),  # short side < 256: INTER_AREA falls back to its bilinear variant
    ("exact_256", 256, 256, "RGB"),
    ("fast_2x", 512, 770, "RGB"),  # integer ratio 2 on both axes
    ("fast_3x", 900, 768, "RGB"),  # integer ratio 3 on both axes
    ("gray_odd", 377, 250, "L"),
    ("cmyk_odd", 299, 451, "CMYK"),
    ("tall_thin", 640, 257, "RGB"),
]


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Noise over gradients (every pixel matters to the resize), saved as JPEGs of the listed modes."""
    root = tmp_path_factory.mktemp("vision")
    out = {}
    for k, (name, h, w, mode) in enumerate(IMAGES):
        rng = np.random.default_rng(k)
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], axis=-1)
        rgb = np.clip(base + rng.integers(-60, 61, size=(h, w, 3)), 0, 255).astype(np.uint8)
        path = root / f"{name}.jpg"
        Image.fromarray(rgb).convert(mode).save(path, format="JPEG", quality=90)
        out[name] = path
    return out


# ---------------------------------------------------------------- independent oracles


def oracle_decode_bgr(path: Path) -> np.ndarray:
    """What cv2.imread(IMREAD_COLOR) returns, from Pillow's decode: gray replicated; CMYK as OpenCV converts
    Adobe (inverted) CMYK, c' = k - ((255 - c) * k >> 8) on the inverted samples; colour channels reversed."""
    with Image.open(path) as im:
        a = np.asarray(im).astype(np.int64)
        mode = im.mode
    if mode == "L":
        return np.repeat(a[..., None], 3, axis=2).astype(np.uint8)
    if mode == "CMYK":
        inv = 255 - a  # Pillow un-inverts Adobe CMYK; OpenCV works on the raw (inverted) samples
        k = inv[..., 3]
        rgb = np.stack([k - (((255 - inv[..., c]) * k) >> 8) for c in range(3)], axis=-1)
        return rgb[..., ::-1].astype(np.uint8)
    return a[..., ::-1].astype(np.uint8)


def _area_tab(ssize: int, dsize: int, scale: float) -> list[tuple[int, int, np.float32]]:
    """(dst index, src index, weight) of OpenCV's area decimation along one axis."""
    tab = []
    for d in range(dsize):
        f1 = d * scale
        f2 = f1 + scale
        cell = min(scale, ssize - f1)
        s1, s2 = math.ceil(f1), math.floor(f2)
        s2 = min(s2, ssize - 1)
        s1 = min(s1, s2)
        if s1 - f1 > 1e-3:
            tab.append((d, s1 - 1, np.float32((s1 - f1) / cell)))
        tab += [(d, s, np.float32(1.0 / cell)) for s in range(s1, s2)]
        if f2 - s2 > 1e-3:
            tab.append((d, s2, np.float32(min(min(f2 - s2, 1.0), cell) / cell)))
    return tab


def oracle_inter_area(src: np.ndarray, dw: int, dh: int) -> np.ndarray:
    """cv2.resize(src, (dw, dh), INTER_AREA) for uint8 HxWx3, all three of OpenCV's regimes."""
    sh, sw, cn = src.shape
    if (sh, sw) == (dh, dw):
        return src.copy()
    ix, iy = dw / sw, dh / sh
    sx, sy = 1.0 / ix, 1.0 / iy
    if sx >= 1 and sy >= 1:
        kx, ky = int(round(sx)), int(round(sy))
        if abs(sx - kx) < np.finfo(float).eps and abs(sy - ky) < np.finfo(float).eps:
            # integer ratio: block sums; the 2x2 SIMD kernel rounds half up, the generic one multiplies by
            # 1/area in float and rounds half to even
            blocks = src[: dh * ky, : dw * kx].astype(np.int64).reshape(dh, ky, dw, kx, cn).sum(axis=(1, 3))
            if kx == ky == 2:
                return ((blocks + 2) >> 2).astype(np.uint8)
            scale = np.float32(1.0) / np.float32(kx * ky)
            return np.clip(np.rint(blocks.astype(np.float32) * scale), 0, 255).astype(np.uint8)
        # general decimation: float32 weights, horizontal sums per source row, then vertical accumulation
        s = src.astype(np.float32)
        rows = np.zeros((sh, dw, cn), np.float32)
        for d, i, a in _area_tab(sw, dw, sx):
            rows[:, d] = rows[:, d] + s[:, i] * a
        acc = np.zeros((dh, dw, cn), np.float32)
        for d, i, b in _area_tab(sh, dh, sy):
            acc[d] = acc[d] + b * rows[i]
        return np.clip(np.rint(acc), 0, 255).astype(np.uint8)

    # up-scaling: linear interpolation with "area" coefficients in 11-bit fixed point
    def coeffs(ssize: int, dsize: int, scale: float, inv: float) -> list[tuple[int, int, int]]:
        out = []
        for d in range(dsize):
            s_ = math.floor(d * scale)
            f = np.float32((d + 1) - (s_ + 1) * inv)
            f = np.float32(0.0) if f <= 0 else np.float32(f - math.floor(f))
            if s_ >= ssize - 1:
                f, s_ = np.float32(0.0), ssize - 1
            c0 = int(np.rint(np.float32((np.float32(1.0) - f) * np.float32(2048))))
            c1 = int(np.rint(np.float32(f * np.float32(2048))))
            out.append((s_, c0, c1))
        return out

    a = src.astype(np.int64)
    h = np.zeros((sh, dw, cn), np.int64)
    for d, (s_, c0, c1) in enumerate(coeffs(sw, dw, sx, ix)):
        h[:, d] = a[:, s_] * 2048 if s_ + 1 >= sw else a[:, s_] * c0 + a[:, s_ + 1] * c1
    out = np.zeros((dh, dw, cn), np.int64)
    for d, (s_, b0, b1) in enumerate(coeffs(sh, dh, sy, iy)):
        r0, r1 = min(s_, sh - 1), min(s_ + 1, sh - 1)
        out[d] = (((b0 * (h[r0] >> 4)) >> 16) + ((b1 * (h[r1] >> 4)) >> 16) + 2) >> 2
    return np.clip(out, 0, 255).astype(np.uint8)


PRECISION_BITS = 22  # Pillow's 8-bit resampling: 32 - 8 - 2


def _pil_coeffs(in_size: int, out_size: int) -> list[tuple[int, list[int]]]:
    """(first source index, fixed-point weights) per output pixel of Pillow's bilinear (triangle) filter."""
    scale = in_size / out_size
    fscale = max(scale, 1.0)
    support = 1.0 * fscale
    out = []
    for o in range(out_size):
        center = (o + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        inv = 1.0 / fscale  # Pillow multiplies by the reciprocal; dividing differs in the last bit
        w = [max(0.0, 1.0 - abs((x + lo - center + 0.5) * inv)) for x in range(hi - lo)]
        total = 0.0
        for v in w:
            total += v
        w = [v / total for v in w] if total != 0.0 else w
        out.append((lo, [int(-0.5 + v * (1 << PRECISION_BITS)) if v < 0 else int(0.5 + v * (1 << PRECISION_BITS))
                         for v in w]))
    return out


def _pil_pass(a: np.ndarray, out_size: int, axis: int) -> np.ndarray:
    a = np.moveaxis(a.astype(np.int64), axis, 0)
    res = np.empty((out_size, *a.shape[1:]), np.uint8)
    for o, (lo, w) in enumerate(_pil_coeffs(a.shape[0], out_size)):
        acc = np.full(a.shape[1:], 1 << (PRECISION_BITS - 1), np.int64)
        for k, wk in enumerate(w):
            acc += a[lo + k] * wk
        res[o] = np.clip(acc >> PRECISION_BITS, 0, 255)  # clip8: >= 255.x -> 255, <= 0 -> 0
    return np.moveaxis(res, 0, axis)


def _pillow_vertical_first(h: int, w: int, oh: int, ow: int) -> bool:
    """Pillow >= 13 runs the vertical pass first when the height shrinks by more than twice as many pixels as the
    width (python-pillow/Pillow#9549); older versions always run the horizontal pass first. The passes round to
    uint8 in between, so the order changes results."""
    major = int(PIL.__version__.split(".")[0])
    return major >= 13 and oh < h and (h - oh) > 2 * (w - ow)


def oracle_pil_bilinear(rgb: np.ndarray, ow: int, oh: int) -> np.ndarray:
    """Image.resize((ow, oh), BILINEAR): two separable passes, each rounding to uint8."""
    h, w = rgb.shape[:2]
    passes = [(ow, 1, ow != w), (oh, 0, oh != h)]
    if _pillow_vertical_first(h, w, oh, ow):
        passes.reverse()
    out = rgb
    for size, axis, needed in passes:
        if needed:
            out = _pil_pass(out, size, axis)
    return out


def reference_resize_dims(h: int, w: int) -> tuple[int, int]:
    """The reference's resize_with_aspectratio(224, 224, scale=87.5) target (height, width)."""
    short = int(100.0 * 224 / 87.5)
    return (int(short * h / w), short) if h > w else (short, int(short * w / h))


def torchvision_dims(h: int, w: int) -> tuple[int, int]:
    """torchvision resize(256) target (height, width): short side 256, long side int(256 * long / short)."""
    if w <= h:
        return int(256 * h / w), 256
    return 256, int(256 * w / h)


# ---------------------------------------------------------------- tests


def test_the_images_exercise_every_resize_regime() -> None:
    """Guards the fixture: OpenCV's three INTER_AREA regimes plus the identity, Pillow's two pass orders."""
    regimes, orders = set(), set()
    for _, h, w, _ in IMAGES:
        dh, dw = reference_resize_dims(h, w)
        sx, sy = w / dw, h / dh
        if (dh, dw) == (h, w):
            regimes.add("identity")
        elif sx < 1 or sy < 1:
            regimes.add("upscale")
        elif sx == int(sx) and sy == int(sy):
            regimes.add(f"fast_{int(sx)}x")
        else:
            regimes.add("area")
        th, tw = torchvision_dims(h, w)
        orders.add(_pillow_vertical_first(h, w, th, tw))
    assert regimes == {"identity", "upscale", "fast_2x", "fast_3x", "area"}
    assert orders == ({False, True} if int(PIL.__version__.split(".")[0]) >= 13 else {False})


@pytest.mark.parametrize("name", [n for n, *_ in IMAGES])
def test_decode_matches_an_independent_decoder(images: dict[str, Path], name: str) -> None:
    bgr = vision.read_bgr(images[name])
    assert bgr.dtype == np.uint8 and bgr.ndim == 3 and bgr.shape[2] == 3  # gray and CMYK too
    np.testing.assert_array_equal(bgr, oracle_decode_bgr(images[name]))


@pytest.mark.parametrize("name", [n for n, *_ in IMAGES])
def test_onnx_tf_pipeline_equals_numpy_oracle(images: dict[str, Path], name: str) -> None:
    rgb = oracle_decode_bgr(images[name])[..., ::-1]
    h, w = rgb.shape[:2]
    dh, dw = reference_resize_dims(h, w)
    expected_resized = oracle_inter_area(np.ascontiguousarray(rgb), dw, dh)
    resized = vision.resize_with_aspectratio(np.ascontiguousarray(rgb), 224, 224)
    assert resized.shape == (dh, dw, 3)
    np.testing.assert_array_equal(resized, expected_resized)  # uint8 stage: exact

    top, left = int((dh - 224) / 2), int((dw - 224) / 2)
    expected_crop = expected_resized[top:top + 224, left:left + 224]
    np.testing.assert_array_equal(vision.center_crop(resized, 224, 224), expected_crop)

    expected = expected_crop.astype(np.float64) - np.array([123.68, 116.78, 103.94])
    nchw = vision.preprocess_onnx_tf(images[name])
    assert nchw.dtype == np.float32 and nchw.shape == (3, 224, 224) and nchw.flags.c_contiguous
    np.testing.assert_allclose(nchw, expected.transpose(2, 0, 1), rtol=0, atol=1e-5)
    nhwc = vision.preprocess_onnx_tf(images[name], layout="NHWC")
    assert nhwc.shape == (224, 224, 3)
    np.testing.assert_array_equal(nhwc, nchw.transpose(1, 2, 0))


@pytest.mark.parametrize("name", [n for n, *_ in IMAGES])
def test_torchvision_pipeline_equals_numpy_oracle(images: dict[str, Path], name: str) -> None:
    rgb = np.ascontiguousarray(oracle_decode_bgr(images[name])[..., ::-1])
    h, w = rgb.shape[:2]
    th, tw = torchvision_dims(h, w)
    expected_resized = oracle_pil_bilinear(rgb, tw, th)
    resized = vision.torchvision_resize(Image.fromarray(rgb), 256)
    assert resized.size == (tw, th)
    np.testing.assert_array_equal(np.asarray(resized), expected_resized)  # uint8 stage: exact

    top, left = int(round((th - 224) / 2.0)), int(round((tw - 224) / 2.0))  # Python's round, like torchvision
    expected_crop = expected_resized[top:top + 224, left:left + 224]
    np.testing.assert_array_equal(np.asarray(vision.torchvision_center_crop(resized, 224)), expected_crop)

    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    expected = (expected_crop / 255.0 - mean) / std
    nchw = vision.preprocess_torchvision(images[name])
    assert nchw.dtype == np.float32 and nchw.shape == (3, 224, 224)
    np.testing.assert_allclose(nchw, expected.transpose(2, 0, 1), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(vision.preprocess_torchvision(images[name], layout="NHWC"),
                                  nchw.transpose(1, 2, 0))


def test_torchvision_tensor_steps_are_bit_identical_to_torch(images: dict[str, Path]) -> None:
    """to_tensor (/255) and normalize done by torch itself, on the cropped uint8 image: the same float32 bits."""
    torch = pytest.importorskip("torch")
    rgb = np.ascontiguousarray(vision.read_bgr(images["portrait_odd"])[..., ::-1])
    crop = np.asarray(vision.torchvision_center_crop(vision.torchvision_resize(Image.fromarray(rgb), 256), 224))
    t = torch.from_numpy(crop.copy()).permute(2, 0, 1).contiguous().to(torch.float32).div(255)
    mean = torch.as_tensor(vision.TORCHVISION_MEAN, dtype=torch.float32).view(-1, 1, 1)
    std = torch.as_tensor(vision.TORCHVISION_STD, dtype=torch.float32).view(-1, 1, 1)
    expected = t.sub(mean).div(std).numpy()
    np.testing.assert_array_equal(vision.preprocess_torchvision(images["portrait_odd"]), expected)


def test_wrong_settings_change_the_tensor(images: dict[str, Path]) -> None:
    path = images["landscape_odd"]
    ref = vision.preprocess_onnx_tf(path)
    bgr = vision.preprocess_onnx_tf(path, channel_order="BGR")
    np.testing.assert_allclose(bgr[0] + 123.68, ref[2] + 103.94, atol=1e-4)  # the channels really swapped
    no_mean = vision.preprocess_onnx_tf(path, mean=None)
    np.testing.assert_allclose(no_mean - ref, np.broadcast_to(np.array([123.68, 116.78, 103.94],
                                                                       np.float32)[:, None, None], ref.shape),
                               atol=1e-4)
    # an array input is treated as already-decoded BGR
    np.testing.assert_array_equal(vision.preprocess_onnx_tf(vision.read_bgr(path)), ref)


def test_errors_are_clean(tmp_path: Path, images: dict[str, Path]) -> None:
    bad = tmp_path / "not_a.jpg"
    bad.write_bytes(b"definitely not a JPEG")
    with pytest.raises(DatasetError, match="cannot decode image"):
        vision.preprocess_onnx_tf(bad)
    with pytest.raises(DatasetError, match="unknown layout"):
        vision.preprocess_onnx_tf(images["exact_256"], layout="NWHC")
    with pytest.raises(DatasetError, match="channel_order"):
        vision.preprocess_onnx_tf(images["exact_256"], channel_order="GRB")
    ctx = {"inputs": [{"layout": "CHW", "shape": [3, 224, 224], "parameters": {"pipeline": "onnx_tf", "colour": 1}}]}
    with pytest.raises(DatasetError, match="colour.*not parameters"):
        vision.preprocess_from_spec(ctx, images["exact_256"])


def test_preprocess_from_spec_follows_the_manifest_parameters(images: dict[str, Path]) -> None:
    path = images["gray_odd"]
    spec = {"layout": "HWC", "shape": [224, 224, 3],
            "parameters": {"pipeline": "onnx_tf", "mean": [1.0, 2.0, 3.0], "channel_order": "RGB"}}
    np.testing.assert_array_equal(vision.preprocess_from_spec({"inputs": [spec]}, path),
                                  vision.preprocess_onnx_tf(path, layout="NHWC", mean=[1.0, 2.0, 3.0]))
    spec = {"layout": "CHW", "shape": [3, 224, 224], "parameters": {"pipeline": "torchvision", "resize": 256}}
    np.testing.assert_array_equal(vision.preprocess_from_spec({"inputs": [spec]}, path),
                                  vision.preprocess_torchvision(path))


def test_cache_hits_on_same_parameters_and_misses_on_any_change(tmp_path: Path, images: dict[str, Path]) -> None:
    src = tmp_path / "img.jpg"
    src.write_bytes(images["portrait_odd"].read_bytes())
    cache = vision.PreprocessCache(tmp_path / "cache")

    first = vision.preprocess_onnx_tf(src, cache=cache)
    assert (cache.hits, cache.misses) == (0, 1)
    again = vision.preprocess_onnx_tf(src, cache=cache)
    assert (cache.hits, cache.misses) == (1, 1)
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(first, vision.preprocess_onnx_tf(src))  # what is cached is the real result

    # any parameter change is a different entry, never the stale tensor
    shifted = vision.preprocess_onnx_tf(src, mean=[0.0, 0.0, 0.0], cache=cache)
    assert (cache.hits, cache.misses) == (1, 2)
    assert not np.array_equal(shifted, first)
    nhwc = vision.preprocess_onnx_tf(src, layout="NHWC", cache=cache)
    assert (cache.hits, cache.misses) == (1, 3) and nhwc.shape == (224, 224, 3)
    tv = vision.preprocess_torchvision(src, cache=cache)
    assert (cache.hits, cache.misses) == (1, 4)
    np.testing.assert_array_equal(tv, vision.preprocess_torchvision(src))
    assert vision.preprocess_onnx_tf(src, cache=cache) is not None and cache.hits == 2

    # so is a changed source file
    src.write_bytes(images["landscape_odd"].read_bytes())
    changed = vision.preprocess_onnx_tf(src, cache=cache)
    assert (cache.hits, cache.misses) == (2, 5)
    np.testing.assert_array_equal(changed, vision.preprocess_onnx_tf(images["landscape_odd"]))
    assert len(list((tmp_path / "cache").rglob("*.npy"))) == 5
    assert not list((tmp_path / "cache").rglob(".*"))  # no temporary files left behind


def test_cache_for_follows_the_manifest_attribute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "c"))
    assert vision.cache_for({"attributes": {}}) is None
    assert vision.cache_for({"attributes": {"preprocess_cache": False}}) is None
    default = vision.cache_for({"attributes": {"preprocess_cache": True}})
    assert default is not None and default.root == (tmp_path / "c").resolve() / "preprocessed"
    assert vision.cache_for({"attributes": {"preprocess_cache": True}}) is default  # shared by load workers
    custom = vision.cache_for({"attributes": {"preprocess_cache": str(tmp_path / "mine")}})
    assert custom is not None and custom.root == tmp_path / "mine"
