"""COCO-style bbox mAP of an accuracy log, exactly as the official ``accuracy-openimages.py`` and
``accuracy-coco.py`` compute it (the two scripts differ only in where the annotations and images live).

Same steps as the scripts: the ground truth is the COCO-format annotations file; the accuracy log's entries are
taken in order, each qsl_idx once (the first response wins); qsl_idx ``i`` is the ``i``-th entry of the file's
``images`` list; each response is float32 7-tuples ``[qsl_idx, ymin, xmin, ymax, xmax, score, label]`` scaled
back by that image's height and width; a response shorter than one tuple marks an image with no results (it
still counts); the label is the category id as is (no inverse map); ``COCOeval(iouType="bbox")`` restricted to
the images seen, ``evaluate``/``accumulate``/``summarize``, and the figure is ``stats[0]`` (AP @ IoU 0.50:0.95,
all areas, 100 detections), printed as ``mAP={:.3f}%``. The text (accuracy.txt) starts with that line, which
the checker reads, and keeps the rest of what the script prints but its timings: the ERROR lines for a payload
qsl_idx that disagrees with LoadGen, and pycocotools' summary table.
Where the script would crash (an unreadable log, a qsl_idx outside the annotations) the metric raises an
AccuracyError naming the file instead; a log without a single detection (the script's loadRes fails on it) scores
0, as every precision is then 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError
from mlharness.tasks.base import AccuracyContext, AccuracyResult, read_accuracy_log
from mlharness.tasks.detection.boxes import FIELDS


def resolve(path: str | Path, dataset_path: Path | None) -> Path:
    p = Path(path)
    return p if p.is_absolute() or dataset_path is None else Path(dataset_path) / p


def load_ground_truth(annotations: Path, metric: str) -> Any:  # -> pycocotools.coco.COCO
    try:
        from pycocotools.coco import COCO
    except ImportError as e:
        raise AccuracyError(f"{metric}: pycocotools is not installed (pip install 'mlharness[vision]')") from e
    if not annotations.is_file():
        raise AccuracyError(f"{metric}: annotations file {annotations} not found")
    try:
        return COCO(str(annotations))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise AccuracyError(f"{metric}: cannot read annotations {annotations}: {e}") from e


def detections_of(entries: list[tuple[int, int, bytes]], images: list[dict[str, Any]], image_dir: str,
                  log_name: str, metric: str) -> tuple[list[dict[str, Any]], list[int], list[str], dict[str, int]]:
    """(pycocotools detections, image ids seen in first-seen order, printed lines, counts) — the scripts' loop."""
    detections: list[dict[str, Any]] = []
    image_ids: dict[int, None] = {}  # the script's set, kept ordered for a reproducible imgIds list
    printed: list[str] = []
    seen: set[int] = set()
    no_results = 0
    for seq_id, idx, raw in entries:
        if idx in seen:
            continue
        seen.add(idx)
        if not 0 <= idx < len(images):
            raise AccuracyError(f"{metric}: {log_name}: seq_id {seq_id} has qsl_idx {idx}, outside the "
                                f"{len(images)} images of the annotations file")
        image = images[idx]
        data = np.frombuffer(raw[: len(raw) // 4 * 4], np.float32)
        if len(data) < FIELDS:
            image_ids[image["id"]] = None
            no_results += 1
            continue
        if len(data) % FIELDS:
            raise AccuracyError(f"{metric}: {log_name}: qsl_idx {idx}: {len(data)} floats is not a whole number "
                                f"of 7-float detections")
        height, width = image["height"], image["width"]
        for i in range(0, len(data), FIELDS):
            image_idx, ymin, xmin, ymax, xmax, score, label = data[i: i + FIELDS]
            if int(image_idx) != idx:
                printed.append(f"ERROR: loadgen({idx}) and payload({int(image_idx)}) disagree on image_idx")
            ymin *= height
            xmin *= width
            ymax *= height
            xmax *= width
            detections.append({
                "image_id": image["id"],
                "image_loc": os.path.join(image_dir, image["file_name"]),
                "category_id": int(label),
                "bbox": [float(xmin), float(ymin), float(xmax - xmin), float(ymax - ymin)],
                "score": float(score),
            })
            image_ids[image["id"]] = None
    counts = {"results": len(entries), "images": len(image_ids), "no_results": no_results,
              "dupes": len(entries) - len(seen), "detections": len(detections)}
    return detections, list(image_ids), printed, counts


def score_map(accuracy_log: Path, ctx: AccuracyContext, *, metric: str, annotations: str, image_dir: str
              ) -> AccuracyResult:
    """The official scripts' mAP for ``accuracy_log`` against ``annotations`` (relative to the dataset path)."""
    if str(ctx.options.get("dtype", "float32")) != "float32":
        raise AccuracyError(f"{metric}: detection responses are float32 7-tuples; dtype "
                            f"{ctx.options.get('dtype')!r} is not supported")
    ann_path = resolve(ctx.options.get("annotations", annotations), ctx.dataset_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        gt = load_ground_truth(ann_path, metric)
    entries = read_accuracy_log(accuracy_log)
    if not entries:
        raise AccuracyError(f"{metric}: accuracy log {accuracy_log} has no entries; nothing to score")
    images = gt.dataset.get("images") or []
    detections, image_ids, printed, counts = detections_of(
        entries, images, str(resolve(ctx.options.get("images", image_dir), ctx.dataset_path)),
        str(accuracy_log), metric)
    for line in printed:
        out.write(line + "\n")
    if detections:
        with contextlib.redirect_stdout(out):
            stats = coco_eval(gt, detections, image_ids)
    else:  # pycocotools' loadRes (and so the official script) fails on an empty result set: every AP is 0
        out.write("no sample has a detection: every average precision is 0\n")
        stats = np.zeros(12)
    value = 100.0 * float(stats[0])
    # the figure first (run summaries show the first line; the checker's pattern finds it on any line), then the
    # script's other meaningful output: payload ERROR lines and pycocotools' summary table (not its timings)
    kept = [line for line in out.getvalue().splitlines() if line.startswith(("ERROR:", " Average", "no sample"))]
    text = "mAP={:.3f}%\n".format(value) + "".join(line + "\n" for line in kept)  # noqa: UP032 - the script's format
    return AccuracyResult(text=text, value=value, name="mAP",
                          details={**counts, "annotations": str(ann_path),
                                   "stats": [float(s) for s in stats]})


def coco_eval(gt: Any, detections: list[dict[str, Any]], image_ids: list[int]) -> np.ndarray:
    """COCOeval bbox over ``image_ids``: the scripts' loadRes (through JSON, as they do) / evaluate / accumulate /
    summarize; returns ``stats``."""
    from pycocotools.cocoeval import COCOeval

    dt = gt.loadRes(json.loads(json.dumps(detections)))
    ev = COCOeval(gt, dt, iouType="bbox")
    ev.params.imgIds = list(image_ids)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return ev.stats
