"""The image list of a COCO-format detection set, in the order of the annotations file's ``images`` (the order
the official accuracy scripts map qsl_idx to)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, read_json


@dataclass
class DetectionImages:
    files: list[Path]
    sizes: list[tuple[int, int]]  # original (height, width) of each image, as the annotations file says
    image_ids: list[int]
    annotations: Path

    def __len__(self) -> int:
        return len(self.files)


def read_images(root: Path | str | None, annotations: str, image_dir: str, count: int | None, what: str
                ) -> DetectionImages:
    """The first ``count`` (all when None) images listed in ``root/annotations``; each must exist under
    ``root/image_dir`` (the reference skips a missing one, which would shift every later qsl_idx onto another
    image's ground truth, so here it is an error)."""
    if root is None:
        raise DatasetError(f"{what}: the dataset needs --dataset-path")
    root = Path(root)
    ann = root / annotations
    if not root.is_dir():
        raise DatasetError(f"{what}: dataset folder {root} does not exist (pass --dataset-path)")
    # COCO's instances_val2017.json is 450 MiB, OpenImages' validation annotations about as large: 1 GiB holds them
    doc = read_json(ann, f"{what}: annotations file", DATA_FILE_LIMIT, error=DatasetError)
    images = doc.get("images") if isinstance(doc, dict) else None
    if not isinstance(images, list) or not images:
        raise DatasetError(f"{what}: {ann} has no 'images' list")
    if count:
        images = images[:count]
    files, sizes, ids = [], [], []
    for i, im in enumerate(images):
        try:
            files.append(root / image_dir / str(im["file_name"]))
            sizes.append((int(im["height"]), int(im["width"])))
            ids.append(int(im["id"]))
        except (KeyError, TypeError, ValueError) as e:
            raise DatasetError(f"{what}: {ann}: images[{i}] lacks a valid file_name/height/width/id: {e}") from e
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise DatasetError(f"{what}: {len(missing)} image(s) listed in {ann} are missing from {root / image_dir}, "
                           f"e.g. {', '.join(missing[:3])}")
    return DetectionImages(files, sizes, ids, ann)
