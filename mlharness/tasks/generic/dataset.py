"""A folder of files as a dataset, and the labels of its samples.

The built-in ``files`` dataset manifest lists a folder's files (:func:`list_files`, sorted by name, the labels
files and hidden files left out) and hands each sample's path to ``preprocess``, as the MLModelScope agents did.
A labels file (:func:`read_labels`) is one of:

- one label per line, line ``i`` being sample ``i``;
- ``<file> <label>`` lines (ImageNet's ``val_map.txt``): matched to the folder's files by name when every name is
  one of them, else line ``i`` is sample ``i``;
- a ``.csv`` file: ``file,label`` or ``label`` rows, a header row (``file,label``) allowed.

Class labels are integers, or class names looked up in MLModelScope's ``features`` file (a synset: line ``k``
names class ``k``, e.g. ``n01440764 tench``; a label matches the line's first word or the whole line).
"""

from __future__ import annotations

import csv
from pathlib import Path

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, read_text_bounded

LABEL_FILES = ("labels.txt", "labels.csv", "val_map.txt", "synset.txt", "targets.txt", "annotations.json")


def list_files(root: Path | str) -> list[Path]:
    """The dataset's files in sample order: regular files of ``root`` (not recursive), by name, without the
    labels files and hidden files."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"dataset folder {root} does not exist (pass --dataset-path)")
    files = sorted(p for p in root.iterdir()
                   if p.is_file() and not p.name.startswith(".") and p.name not in LABEL_FILES
                   and p.suffix.lower() not in (".txt", ".csv", ".json"))
    if not files:
        raise DatasetError(f"dataset folder {root} holds no sample files")
    return files


def _rows(path: Path, whole_lines: bool) -> list[tuple[str | None, str]]:
    try:
        text = read_text_bounded(path, "labels file", DATA_FILE_LIMIT, error=DatasetError)
    except OSError as e:
        raise DatasetError(f"cannot read labels file {path}: {e}") from e
    if path.suffix.lower() == ".csv":
        rows = [r for r in csv.reader(text.splitlines()) if r]
        if rows and [c.strip().lower() for c in rows[0]][-1:] in (["label"], ["target"], ["answer"]):
            rows = rows[1:]
        return [(r[0].strip(), r[-1].strip()) if len(r) > 1 else (None, r[0].strip()) for r in rows]
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if whole_lines:
        return [(None, line.strip()) for line in lines]
    out: list[tuple[str | None, str]] = []
    for n, line in enumerate(lines, 1):
        parts = line.split()
        if len(parts) == 1:
            out.append((None, parts[0]))
        elif len(parts) == 2:
            out.append((parts[0], parts[1]))
        else:
            raise DatasetError(f"{path}, line {n}: expected '<label>' or '<file> <label>', got {line!r}")
    return out


def read_labels(path: Path, files: list[str] | None = None, whole_lines: bool = False) -> list[str]:
    """The label of each sample, in sample order. ``files``: the dataset's file names, to match ``file label``
    rows by name; ``whole_lines``: each line is one label (text answers with spaces)."""
    rows = _rows(Path(path), whole_lines)
    if not rows:
        raise DatasetError(f"labels file {path} is empty")
    named = [f for f, _ in rows if f is not None]
    if files and len(named) == len(rows):
        by_name = {Path(f).name: label for f, label in rows}
        if all(Path(f).name in by_name for f in files):
            return [by_name[Path(f).name] for f in files]
    return [label for _, label in rows]


def read_features(path: Path) -> dict[str, int]:
    """MLModelScope's synset: class name (the line's first word, and the whole line) -> class index."""
    try:
        lines = read_text_bounded(Path(path), "features file", DATA_FILE_LIMIT, error=DatasetError).splitlines()
    except OSError as e:
        raise DatasetError(f"cannot read features file {path}: {e}") from e
    index: dict[str, int] = {}
    for k, line in enumerate(x for x in lines if x.strip()):
        index.setdefault(line.strip(), k)
        index.setdefault(line.split()[0], k)
    return index


def class_ids(labels: list[str], features: Path | None, where: Path) -> list[int]:
    """Integer class labels; names are looked up in ``features``."""
    try:
        return [int(x) for x in labels]
    except ValueError:
        pass
    if features is None:
        raise DatasetError(f"labels file {where} has class names, not numbers; give the class names file "
                           "(accuracy option 'features', or the manifest's model.features_path)")
    index = read_features(features)
    missing = [x for x in labels if x not in index and not x.lstrip("-").isdigit()]
    if missing:
        raise DatasetError(f"labels {missing[:5]} of {where} are not in the features file {features}")
    return [index[x] if x in index else int(x) for x in labels]
