"""stable-diffusion-xl's inputs checked at the door: non-finite latents, images and FID statistics, an accuracy log
entry larger than an image, wrong file formats and FIFOs or devices where files belong. Each case goes through
the real CLI in a subprocess with a timeout, and must end with one error naming the file or the sample, the exit
code of its kind, and no traceback."""

from __future__ import annotations

import json
import os
import stat
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import AccuracyError
from mlharness.manifest.loader import find_builtin

HEX_ONE_IMAGE = 2 * 1024 * 1024 * 3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """Two captions, their images and the latent; tiny FID statistics beside them (no networks are loaded by
    any case here: each is refused first)."""
    from mlharness.tasks.coco_t2i.synth import write_synthetic_captions

    out = write_synthetic_captions(tmp_path_factory.mktemp("hostile") / "ds", count=2)
    np.savez(out / "val2014.npz", mu=np.zeros(3), sigma=np.eye(3))
    return out


def refused(proc, code: int, *names: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


def accuracy(run_cli, ds: Path, log: Path, captions: Path | None = None, statistics: Path | None = None):
    return run_cli("accuracy", "coco-t2i", "--log", str(log), "--caption-path",
                   str(captions or ds / "captions" / "captions.tsv"), "--statistics-path",
                   str(statistics or ds / "val2014.npz"), timeout=120)


def write_log(path: Path, entries: list[dict]) -> Path:
    path.write_text(json.dumps(entries))
    return path


# --- the FID statistics ---

def test_nan_statistics_are_refused_naming_the_file_and_array(run_cli, dataset, tmp_path):
    sigma = np.eye(3)
    sigma[1, 2] = np.nan
    stats = tmp_path / "val2014.npz"
    np.savez(stats, mu=np.zeros(3), sigma=sigma)
    proc = accuracy(run_cli, dataset, write_log(tmp_path / "log.json", []), statistics=stats)
    refused(proc, 2, str(stats), "'sigma'", "non-finite")


def test_an_npy_saved_as_npz_is_refused_naming_the_file(run_cli, dataset, tmp_path):
    stats = tmp_path / "val2014.npz"
    with open(stats, "wb") as f:
        np.save(f, np.zeros((3, 3)))
    proc = accuracy(run_cli, dataset, write_log(tmp_path / "log.json", []), statistics=stats)
    refused(proc, 2, str(stats), ".npy array", "not an .npz")


def test_nan_statistics_never_reach_sqrtm():
    """The distance itself refuses non-finite input (sqrtm of a NaN matrix ran for minutes)."""
    from mlharness.tasks.coco_t2i.metric import frechet_distance

    sigma = np.eye(4)
    with pytest.raises(AccuracyError, match="images' covariance holds non-finite"):
        frechet_distance(np.zeros(4), sigma, np.zeros(4), np.full((4, 4), np.nan))
    with pytest.raises(AccuracyError, match="product of the covariances"):
        frechet_distance(np.zeros(4), sigma * 1e200, np.zeros(4), sigma * 1e200)


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_statistics_that_are_no_file_are_named_as_what_they_are(run_cli, dataset, tmp_path, kind):
    stats = tmp_path / "val2014.npz"
    make_special(stats, kind)
    proc = accuracy(run_cli, dataset, write_log(tmp_path / "log.json", []), statistics=stats)
    refused(proc, 2, str(stats), WHAT[kind])


# --- the captions ---

WHAT = {"fifo": "is a FIFO", "device": "is a character device", "folder": "is a folder"}


def make_special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is, inside tmp_path
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_captions_that_are_no_file_are_named_as_what_they_are(run_cli, dataset, tmp_path, kind):
    captions = tmp_path / "captions.tsv"
    make_special(captions, kind)
    proc = accuracy(run_cli, dataset, write_log(tmp_path / "log.json", []), captions=captions)
    refused(proc, 2, str(captions), WHAT[kind])


# --- the accuracy log ---

def test_an_entry_larger_than_an_image_is_refused_before_it_is_read(run_cli, dataset, tmp_path):
    log = tmp_path / "mlperf_log_accuracy.json"
    with open(log, "w") as f:
        f.write('[{"seq_id": 0, "qsl_idx": 1, "data": "' + "00" * (4 * HEX_ONE_IMAGE // 2) + '"}]')
    proc = accuracy(run_cli, dataset, log)
    refused(proc, 2, str(log), "entry 0 (qsl_idx 1) is larger than", "refused before reading the rest")


def test_a_large_entry_costs_no_more_memory_than_an_image(tmp_path):
    """A 48 MiB entry is refused having held no more than a few buffers: no string of its size is built."""
    from mlharness.tasks.coco_t2i.imagelog import log_images

    log = tmp_path / "mlperf_log_accuracy.json"
    with open(log, "w") as f:
        f.write('[{"seq_id": 0, "qsl_idx": 9, "data": "')
        for _ in range(8):
            f.write("00" * (3 << 20))
        f.write('"}]')
    tracemalloc.start()
    try:
        with pytest.raises(AccuracyError, match=r"entry 0 \(qsl_idx 9\) is larger than"):
            list(log_images(log))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"refusing a 48 MiB entry held {peak / 2**20:.1f} MiB"


def test_a_log_that_is_a_fifo_is_named(run_cli, dataset, tmp_path):
    log = tmp_path / "mlperf_log_accuracy.json"
    os.mkfifo(log)
    refused(accuracy(run_cli, dataset, log), 2, str(log), "is a FIFO")


def test_a_log_that_is_no_array_is_refused(tmp_path):
    from mlharness.tasks.coco_t2i.imagelog import log_images

    for text, match in (('{"qsl_idx": 0}', "expected a JSON array"), ("[5]", "entry 0 is malformed"),
                        ('[{"qsl_idx": "0", "data": ""}]', "entry 0 is malformed")):
        with pytest.raises(AccuracyError, match=match):
            list(log_images(write_log(tmp_path / "log.json", json.loads(text))))


# --- the latents, through a run (the random model's dataset init reads them before any model is built) ---

def run_random(run_cli, ds: Path, out: Path):
    return run_cli("run", "--manifest", "stable-diffusion-xl-random", "--dataset-path", str(ds), "--scenario",
                   "Offline", "--mode", "accuracy", "--count", "1", "--output", str(out), "--no-progress",
                   timeout=120)


def copy_dataset(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    (dst / "latents" / "latents.pt").unlink()
    return dst


def test_nan_latents_are_refused_naming_the_file(run_cli, dataset, tmp_path):
    import torch

    ds = copy_dataset(dataset, tmp_path / "ds")
    latents = torch.randn(1, 4, 128, 128)
    latents[0, 2, 5, 7] = float("nan")
    latents[0, 3, 0, 0] = float("-inf")
    torch.save(latents, ds / "latents" / "latents.pt")
    proc = run_random(run_cli, ds, tmp_path / "run")
    refused(proc, 2, "latents.pt", "2 non-finite values")
    assert not (tmp_path / "run").exists()


def test_a_fifo_as_latents_is_named_without_waiting(run_cli, dataset, tmp_path):
    ds = copy_dataset(dataset, tmp_path / "ds")
    os.mkfifo(ds / "latents" / "latents.pt")
    refused(run_random(run_cli, ds, tmp_path / "run"), 2, "latents.pt", "is a FIFO")


# --- a sample whose image is bad ---

def test_a_nan_image_fails_the_run_naming_the_sample(run_cli, dataset, tmp_path):
    """The oracle fed a float image with a NaN for sample 1: the run refuses it as a model input at load time,
    naming the sample (a cast to uint8 would have made it pixels, and they would have been scored); the shipped
    postprocess's own refusal of a NaN response is test_image_responses_refuse_what_a_cast_would_hide's."""
    text = find_builtin("stable-diffusion-xl-oracle").read_text()
    old = "  def preprocess(ctx, index):\n      return LOADED[index]\n"
    assert old in text
    hostile = ("  import numpy as np\n\n  def preprocess(ctx, index):\n      image = LOADED[index].astype(np.float32)\n"
               "      if index == 1:\n          image[3, 4, 0] = np.nan\n      return image\n")
    text = text.replace(old, hostile).replace("element_type: uint8\n    layout: HWC",  # input and output
                                              "element_type: float32\n    layout: HWC")
    manifest = tmp_path / "nan-oracle.yaml"
    manifest.write_text(text)
    proc = run_cli("run", "--manifest", str(manifest), "--dataset-path", str(dataset), "--scenario", "Offline",
                   "--mode", "accuracy", "--count", "2", "--output", str(tmp_path / "run"), "--no-progress",
                   timeout=120)
    refused(proc, 3, "sample 1: input 0", "NaN or infinite")
    assert not (tmp_path / "run" / "accuracy.txt").exists()


def test_image_responses_refuse_what_a_cast_would_hide():
    from mlharness.tasks.coco_t2i.imagelog import image_responses

    ok = np.zeros((2, 4, 4, 3), np.float32)
    assert image_responses(ok, [5, 6]).dtype == np.uint8
    for value, match in ((np.inf, "qsl_idx 6 holds 1 non-finite"), (-1.0, "qsl_idx 6 has values from -1.0"),
                         (300.0, "to 300.0")):
        bad = ok.copy()
        bad[1, 0, 0, 0] = value
        with pytest.raises(ValueError, match=match):
            image_responses(bad, [5, 6])
