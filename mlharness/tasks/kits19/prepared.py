"""Prepared KiTS19 folders: the one ``mlharness dataset prepare kits19`` writes (:class:`PreparedKits19`) and the
one the MLPerf reference's ``preprocess.py`` (vision/medical_imaging/3d-unet-kits19) writes (:class:`ReferenceKits19`);
:meth:`PreparedKits19.load` reads either.

The reference writes, into its ``--results_dir``:

- ``preprocessed_files.pkl``: ``{"file_list": [case, ...], "cases": {case: aux}}``; the file list's order is the
  qsl index, ``aux`` holds ``image_shape`` ((1, D, H, W)), ``original_affine``, ``reshaped_affine``,
  ``zoom_factor`` and ``case``;
- ``<case>.pkl``: ``[image float32 (1, D, H, W), label uint8 (1, D, H, W)]``, what its QSL feeds the model;
- ``nifti/<case>/imaging.nii.gz`` and ``segmentation.nii.gz`` (the inference set only): the ground truth its
  ``accuracy_kits.py`` scores against.

:class:`ReferenceKits19` reads that folder with the interface of an mlharness preparation.  There are no
checksums to verify (the reference checks md5 sums of its own meta folder at preprocessing time); the pickles
are read with an unpickler that builds nothing but containers and numpy arrays.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import open_regular, read_bytes_bounded, read_json
from mlharness.tasks.kits19.dataset import FORMAT, META_FILE, REFERENCE_META_FILE, read_nifti


class PreparedKits19:
    """A folder written by :func:`prepare`; index i is ``file_list[i]`` (the qsl index)."""

    def __init__(self, root: Path, meta: dict[str, Any]):
        self.root = root
        self.meta = meta
        self.cases: list[str] = list(meta["file_list"])

    @classmethod
    def load(cls, root: Path | str | None) -> PreparedKits19:
        if root is None:
            raise DatasetError("KiTS19 needs --dataset-path: the folder written by 'mlharness dataset prepare kits19'")
        root = Path(root)
        path = root / META_FILE
        if not os.path.lexists(path) and os.path.lexists(root / REFERENCE_META_FILE) and not (root / "images").is_dir():
            return ReferenceKits19.open_reference(root)  # written by the reference's preprocess.py
        if not os.path.lexists(path):
            raise DatasetError(f"{root} is not a prepared KiTS19 folder (neither {META_FILE} nor the reference's "
                               f"{REFERENCE_META_FILE} is there); run 'mlharness dataset prepare kits19 --raw "
                               f"<kits19/data> --out {root}' or the reference's preprocess.py")
        # about 1 KiB a case (shape, affines, checksums): the 489 cases of KiTS19 hold well under 1 MiB
        meta = read_json(path, "KiTS19 preparation metadata", 64 << 20, error=DatasetError)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or not meta.get("file_list"):
            raise DatasetError(f"{path} is not a KiTS19 preparation written by mlharness")
        missing = [c for c in meta["file_list"] if c not in meta.get("cases", {})]
        if missing:
            raise DatasetError(f"{path}: no entry for cases {missing[:5]}")
        return cls(root, meta)

    # the name manifests' hooks call (the built-in kits19.yaml among them)
    open = load

    def __len__(self) -> int:
        return len(self.cases)

    def entry(self, case: str) -> dict[str, Any]:
        return self.meta["cases"][case]

    def _read_verified(self, case: str, key: str) -> bytes:
        rel = self.entry(case)["files"][key]
        # a pre-processed float32 volume is at most a few hundred MiB; only what the file holds is read
        data = read_bytes_bounded(self.root / rel, f"KiTS19 {key.replace('_', ' ')} of {case}", 4 << 30,
                                  error=DatasetError)
        expected = self.entry(case)["sha256"][rel]
        if hashlib.sha256(data).hexdigest() != expected:
            raise DatasetError(f"{self.root / rel} does not match the sha256 recorded at preparation; prepare the "
                               "dataset again")
        return data

    def image(self, index: int) -> np.ndarray:
        """The pre-processed (1, D, H, W) float32 volume of sample ``index``, checksum verified."""
        case = self.cases[index]
        arr = np.load(io.BytesIO(self._read_verified(case, "image")), allow_pickle=False)
        if arr.dtype != np.float32 or arr.ndim != 4 or list(arr.shape[1:]) != self.entry(case)["image_shape"]:
            raise DatasetError(f"{case}: pre-processed image has shape {arr.shape} {arr.dtype}, expected "
                               f"(1, {', '.join(map(str, self.entry(case)['image_shape']))}) float32")
        return arr

    def ground_truth(self, case: str) -> np.ndarray:
        """The reference's ground truth (``nifti/<case>/segmentation.nii.gz``) as uint8 (D, H, W), verified."""
        import nibabel

        data = self._read_verified(case, "ground_truth")
        try:
            img = nibabel.Nifti1Image.from_bytes(gzip.decompress(data))
            label = np.asanyarray(img.dataobj)
            label = label.astype(np.uint8) if np.issubdtype(label.dtype, np.integer) else \
                img.get_fdata().astype(np.uint8)
        except Exception as e:  # gzip, nibabel header or data errors
            raise DatasetError(f"cannot read the ground truth of {case}: {e}") from e
        if list(label.shape) != self.entry(case)["image_shape"]:
            raise DatasetError(f"{case}: ground truth has shape {label.shape}, expected "
                               f"{tuple(self.entry(case)['image_shape'])}")
        return label


# What a pickle of dicts, lists, tuples and numpy arrays (any protocol, numpy 1 or 2) refers to.
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or (module == "numpy" and name.endswith("DType")) or \
                (module == "numpy.dtypes" and name.endswith("DType")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only numpy arrays and containers")


def load_pickle(path: Path) -> Any:
    with open_regular(path, "KiTS19 pickle", error=DatasetError) as f:
        try:
            return _ArrayUnpickler(f).load()
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError) as e:
            raise DatasetError(f"cannot read {path}: {e}") from e


def _shape(case: str, aux: Any, path: Path) -> list[int]:
    shape = aux.get("image_shape") if isinstance(aux, dict) else None
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):
        dims = []
    if len(dims) == 4 and dims[0] == 1:
        dims = dims[1:]
    if len(dims) != 3 or min(dims) < 1:
        raise DatasetError(f"{path}: case {case} has no image_shape (1, D, H, W), got {shape!r}")
    return dims


class ReferenceKits19(PreparedKits19):
    """A reference-preprocessed folder; index i is ``file_list[i]``, as in the reference QSL."""

    layout = "reference"

    @classmethod
    def open_reference(cls, root: Path) -> ReferenceKits19:
        path = root / REFERENCE_META_FILE
        content = load_pickle(path)
        file_list = content.get("file_list") if isinstance(content, dict) else None
        aux = content.get("cases") if isinstance(content, dict) else None
        if not isinstance(file_list, list | tuple) or not file_list or not all(isinstance(c, str) for c in file_list) \
                or not isinstance(aux, dict):
            raise DatasetError(f"{path} is not the reference's preprocessed_files.pkl (a dict with a 'file_list' of "
                               "case names and their 'cases')")
        if len(set(file_list)) != len(file_list):
            raise DatasetError(f"{path}: the file list names a case twice")
        missing = [c for c in file_list if c not in aux]
        if missing:
            raise DatasetError(f"{path}: no entry in 'cases' for {', '.join(missing[:5])}")
        absent = [f"{c}.pkl" for c in file_list if not os.path.lexists(root / f"{c}.pkl")]
        if absent:
            raise DatasetError(f"{root}: {len(absent)} pre-processed volume(s) of the file list are missing, e.g. "
                               f"{', '.join(absent[:3])}")
        cases = {}
        for case in file_list:
            entry = aux[case]
            cases[case] = {
                "case": case, "image_shape": _shape(case, entry, path),
                "reshaped_affine": np.asarray(entry.get("reshaped_affine", np.eye(4)), dtype=np.float64).tolist(),
                "original_affine": np.asarray(entry.get("original_affine", np.eye(4)), dtype=np.float64).tolist(),
                "zoom_factor": np.asarray(entry.get("zoom_factor", np.ones(3)), dtype=np.float64).tolist(),
                "files": {"image": f"{case}.pkl", "ground_truth": f"nifti/{case}/segmentation.nii.gz"},
            }
        return cls(root, {"format": "reference-preprocess.py", "file_list": list(file_list), "cases": cases})

    def image(self, index: int) -> np.ndarray:
        """The (1, D, H, W) float32 volume of sample ``index``: element 0 of ``<case>.pkl``, as the reference's
        QSL loads it."""
        case = self.cases[index]
        content = load_pickle(self.root / f"{case}.pkl")
        arr = content[0] if isinstance(content, list | tuple) and content else None
        shape = self.entry(case)["image_shape"]
        if not isinstance(arr, np.ndarray) or arr.dtype != np.float32 or list(arr.shape) != [1, *shape]:
            got = f"{arr.shape} {arr.dtype}" if isinstance(arr, np.ndarray) else type(arr).__name__
            raise DatasetError(f"{self.root / f'{case}.pkl'}: expected [image, label] with the image (1, "
                               f"{', '.join(map(str, shape))}) float32, got {got}")
        return arr

    def ground_truth(self, case: str) -> np.ndarray:
        """``nifti/<case>/segmentation.nii.gz`` as uint8 (D, H, W), read as ``accuracy_kits.py`` reads it."""
        path = self.root / "nifti" / case / "segmentation.nii.gz"
        if not path.is_file():
            raise DatasetError(f"{path} is missing: the reference writes the ground truth only for the inference "
                               "set (preprocess.py without --calibration)")
        _, label = read_nifti(path, np.uint8)
        if list(label.shape) != self.entry(case)["image_shape"]:
            raise DatasetError(f"{path}: ground truth has shape {label.shape}, expected "
                               f"{tuple(self.entry(case)['image_shape'])}")
        return label
