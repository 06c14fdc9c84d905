"""KiTS19 accuracy as the reference's accuracy_kits.py: the official line only when every case of the dataset is
in the log, a labelled subset line otherwise, the per-case CSV in the reference's column order, and a folder
written in the layout of the reference's preprocess.py (built here by hand) read as a dataset.

Expected DICE figures are computed here from the formula (2|X∩Y| + 1e-6) / (|X| + |Y| + 1e-6), independently of
mlharness's metric."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import DatasetError
from mlharness.submission.rules import ACC_PATTERNS
from mlharness.tasks.kits19.prepared import PreparedKits19

SHAPES = [(8, 10, 12), (10, 8, 8), (12, 8, 10)]
CASES = ["case_00003", "case_00000", "case_00007"]  # the file list's order is the qsl index, not sorted


def _dice(pred: np.ndarray, truth: np.ndarray, c: int) -> float:
    p, t = pred == c, truth == c
    return (2.0 * float((p & t).sum()) + 1e-6) / (float(t.sum()) + float(p.sum()) + 1e-6)


def _affine(i: int) -> np.ndarray:
    a = np.diag([-1.6, 1.2, -1.2, 1.0])
    a[:3, 3] = [10.0 * i, -5.0, 3.0]
    return a


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What preprocess.py writes: <case>.pkl ([image, label], (1, D, H, W)), nifti/<case>/*.nii.gz and
    preprocessed_files.pkl with the file list and each case's aux (image_shape a tuple, affines as arrays)."""
    import nibabel

    root = tmp_path_factory.mktemp("reference_preprocessed")
    rng = np.random.default_rng(1)
    aux = {}
    for i, (case, shape) in enumerate(zip(CASES, SHAPES, strict=True)):
        image = rng.normal(size=(1, *shape)).astype(np.float32)
        label = rng.integers(0, 3, size=(1, *shape)).astype(np.uint8)
        with open(root / f"{case}.pkl", "wb") as f:
            pickle.dump([image, label], f)
        (root / "nifti" / case).mkdir(parents=True)
        nibabel.save(nibabel.Nifti1Image(image[0], affine=_affine(i)), str(root / "nifti" / case / "imaging.nii.gz"))
        nibabel.save(nibabel.Nifti1Image(label[0], affine=_affine(i)),
                     str(root / "nifti" / case / "segmentation.nii.gz"))
        aux[case] = {"original_affine": _affine(i) * 2, "reshaped_affine": _affine(i),
                     "zoom_factor": np.array([2.0, 1.5, 1.5]), "case": case, "image_shape": image.shape}
    with open(root / "preprocessed_files.pkl", "wb") as f:
        pickle.dump({"file_list": CASES, "cases": aux}, f)
    return root


def _truth(root: Path, case: str) -> np.ndarray:
    with open(root / f"{case}.pkl", "rb") as f:
        return pickle.load(f)[1][0]


def _predictions(root: Path) -> list[np.ndarray]:
    """Each case's ground truth with a slab of voxels relabelled, so the DICE is high but not 1."""
    out = []
    for i, case in enumerate(CASES):
        pred = _truth(root, case).copy()
        pred[: i + 2] = (pred[: i + 2] + 1) % 3
        out.append(pred)
    return out


def _log(path: Path, predictions: list[np.ndarray], indexes: list[int]) -> Path:
    # entries without seq_id: the reference reads only qsl_idx and data
    path.write_text(json.dumps([{"qsl_idx": i, "data": predictions[i].tobytes().hex().upper()} for i in indexes]))
    return path


def test_reference_layout_is_read_as_a_dataset(reference_dir: Path) -> None:
    data = PreparedKits19.load(reference_dir)
    assert data.cases == CASES and len(data) == 3
    for i, case in enumerate(CASES):
        with open(reference_dir / f"{case}.pkl", "rb") as f:
            image, label = pickle.load(f)
        assert np.array_equal(data.image(i), image) and data.image(i).dtype == np.float32
        assert np.array_equal(data.ground_truth(case), label[0])
        assert data.entry(case)["image_shape"] == list(SHAPES[i])
        assert np.allclose(data.entry(case)["reshaped_affine"], _affine(i))


def test_reference_layout_errors_name_the_file(reference_dir: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(reference_dir, copy)
    (copy / f"{CASES[1]}.pkl").unlink()
    with pytest.raises(DatasetError, match=rf"missing, e\.g\. {CASES[1]}\.pkl"):
        PreparedKits19.load(copy)

    class Evil:
        def __reduce__(self):
            # eval, not print: an in-process Ray driver (the cluster tests) replaces builtins.print with its own
            return (eval, ("'pickles run code'",))

    with open(copy / "preprocessed_files.pkl", "wb") as f:
        pickle.dump({"file_list": CASES, "cases": Evil()}, f)
    with pytest.raises(DatasetError, match="refusing to load builtins.eval"):
        PreparedKits19.load(copy)
    (copy / "preprocessed_files.pkl").unlink()
    with pytest.raises(DatasetError, match="neither kits19_preprocessed.json nor the reference's"):
        PreparedKits19.load(copy)


def test_all_cases_give_the_official_line_and_csv(run_cli, reference_dir: Path, tmp_path: Path) -> None:
    preds = _predictions(reference_dir)
    log = _log(tmp_path / "mlperf_log_accuracy.json", preds, [2, 0, 1])  # any order of entries
    proc = run_cli("accuracy", "kits19", "--log", str(log), "--preprocessed-dir", str(reference_dir),
                   "--output-dir", str(tmp_path / "post"))
    assert proc.returncode == 0, proc.stderr
    per_case = [(_dice(p, _truth(reference_dir, c), 1), _dice(p, _truth(reference_dir, c), 2))
                for p, c in zip(preds, CASES, strict=True)]
    kidney, tumor = (float(np.mean([pc[k] for pc in per_case])) for k in (0, 1))
    composite = float(np.mean([np.mean(pc) for pc in per_case]))
    assert 0.5 < composite < 1
    assert proc.stdout == f"Accuracy: mean = {composite:.5f}, kidney = {kidney:.4f}, tumor = {tumor:.4f}\n"
    assert re.match(ACC_PATTERNS["DICE"], proc.stdout)
    rows = (tmp_path / "post" / "kits19_dice.csv").read_text().splitlines()
    assert rows[0] == "case,kidney,tumor,composite"  # the reference's summary.csv columns
    assert [r.split(",")[0] for r in rows[1:]] == [*CASES, "mean"]  # its file-list order
    first = [float(v) for v in rows[1].split(",")[1:]]
    assert first == pytest.approx([per_case[0][0], per_case[0][1], np.mean(per_case[0])], abs=1e-12)
    import nibabel

    saved = nibabel.load(str(tmp_path / "post" / "kits19_predictions" / CASES[2] / "prediction.nii.gz"))
    assert np.array_equal(np.asanyarray(saved.dataobj), preds[2]) and np.allclose(saved.affine, _affine(2))


def test_some_cases_give_a_labelled_subset_line(run_cli, reference_dir: Path, tmp_path: Path) -> None:
    preds = _predictions(reference_dir)
    log = _log(tmp_path / "mlperf_log_accuracy.json", preds, [0, 1])
    proc = run_cli("accuracy", "kits19", "--log", str(log), "--preprocessed-dir", str(reference_dir),
                   "--no-save-predictions")
    assert proc.returncode == 0, proc.stderr
    per_case = [(_dice(preds[i], _truth(reference_dir, CASES[i]), 1), _dice(preds[i], _truth(reference_dir, CASES[i]),
                                                                              2)) for i in (0, 1)]
    composite = float(np.mean([np.mean(pc) for pc in per_case]))
    kidney, tumor = (float(np.mean([pc[k] for pc in per_case])) for k in (0, 1))
    assert proc.stdout == (f"subset of 2 of 3 cases, not comparable: DICE mean = {composite:.5f}, "
                           f"kidney = {kidney:.4f}, tumor = {tumor:.4f}\n")
    # neither mlharness's checker patterns nor the official DICE pattern (searched anywhere) read it
    assert not any(re.match(p, proc.stdout) for p in ACC_PATTERNS.values())
    assert not re.search(r"Accuracy\:\s*mean\s*=\s*([\d\.]+)", proc.stdout)


def test_decoding_follows_the_reference(run_cli, reference_dir: Path, tmp_path: Path) -> None:
    preds = _predictions(reference_dir)
    # float responses are truncated toward zero as the reference's NIfTI round trip and astype(uint8) do
    fractional = [p.astype(np.float32) + np.float32(0.5) for p in preds]
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps([{"seq_id": 9 - i, "qsl_idx": i, "data": fractional[i].tobytes().hex()}
                               for i in range(3)]))
    proc = run_cli("accuracy", "kits19", "--log", str(log), "--preprocessed-dir", str(reference_dir), "--dtype",
                   "float32", "--no-save-predictions")
    exact = run_cli("accuracy", "kits19", "--log", str(_log(tmp_path / "exact.json", preds, [0, 1, 2])),
                    "--preprocessed-dir", str(reference_dir), "--no-save-predictions")
    assert proc.returncode == exact.returncode == 0, proc.stderr + exact.stderr
    assert proc.stdout == exact.stdout and proc.stdout.startswith("Accuracy: mean = ")
    # a second response for a case: the reference refuses the log ("Missing some results!")
    log.write_text(json.dumps([{"qsl_idx": i, "data": preds[i].tobytes().hex()} for i in (0, 1, 2, 1)]))
    proc = run_cli("accuracy", "kits19", "--log", str(log), "--preprocessed-dir", str(reference_dir))
    assert proc.returncode == 2 and "more than one response" in proc.stderr
