"""The ImageNet validation layout: ``val_map.txt`` (``<file> <label>``, the line number is the qsl_idx) and the
images it lists, in the order the accuracy script scores them."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, read_text_bounded

log = logging.getLogger(__name__)


def read_val_map(path: Path | str) -> tuple[list[str], np.ndarray]:
    """(file names, int64 labels) of an ImageNet-style ``val_map.txt``; index i is qsl_idx i.

    Parsed like the official script (``line.strip().split()``, name = column 0, label = int(column 1)) so the
    qsl_idx -> label mapping is identical.  Trailing blank lines are tolerated; a blank line in the middle would
    shift every later qsl_idx, so it is an error, as is a missing or non-integer label.
    """
    path = Path(path)
    try:
        text = read_text_bounded(path, "val map", DATA_FILE_LIMIT, error=DatasetError)
    except OSError as e:
        raise DatasetError(f"cannot read val map {path}: {e}") from e
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    names: list[str] = []
    labels: list[int] = []
    for lineno, line in enumerate(lines, start=1):
        cols = line.strip().split()
        if len(cols) < 2:
            raise DatasetError(
                f"{path}, line {lineno}: expected '<file name> <integer label>', got {line.strip()!r}"
            )
        try:
            label = int(cols[1])
        except ValueError as e:
            raise DatasetError(f"{path}, line {lineno}: label {cols[1]!r} is not an integer") from e
        names.append(cols[0])
        labels.append(label)
    return names, np.asarray(labels, dtype=np.int64)


def validation_files(root: Path | str, count: int | None = None, val_map: str = "val_map.txt") -> list[Path]:
    """The first ``count`` (all when None) images of an ImageNet validation folder, in val-map order.

    The val map's line number is the sample index (qsl_idx) the accuracy script scores against, so a missing
    image is an error here: the reference skips it, which shifts every later index onto the wrong label.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"ImageNet: dataset folder {root} does not exist (pass --dataset-path)")
    names, _ = read_val_map(root / val_map)
    if not names:
        raise DatasetError(f"ImageNet: {root / val_map} lists no images")
    files = [root / name for name in (names[:count] if count else names)]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise DatasetError(f"ImageNet: {len(missing)} image(s) listed in {root / val_map} are missing from {root}, "
                           f"e.g. {', '.join(missing[:3])}")
    return files
