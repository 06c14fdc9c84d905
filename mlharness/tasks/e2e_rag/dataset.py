"""e2e-rag-qna's questions: ``frames_dataset.tsv`` read as the reference's ``QSL.py`` reads it, and each
question's first pipeline item.

``QSL.py`` and ``accuracy_eval.py`` take, per row, ``Prompt`` (the query), ``Answer`` (the ground truth) and every
non-empty ``wikipedia_link_*`` cell in column order (the expected URLs). pandas would read a short or long row
silently (NaN cells, or a shifted row); here a row that does not have the header's number of cells, or has no
prompt or no answer, is a :class:`DatasetError` naming the file, the line and the column, before any sample runs.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import iter_lines

REQUIRED = ("Prompt", "Answer")
LINK_PREFIX = "wikipedia_link_"
# FRAMES' longest row (a prompt of a few sentences, its answer, up to eleven links) is under 4 KiB; a line past
# 1 MiB is no question, and a query of tens of MiB would only exhaust the pipeline's memory later, unexplained
LINE_LIMIT = 1 << 20


@dataclass(frozen=True)
class Question:
    index: int  # the row's position: LoadGen's sample index
    query: str
    ground_truth: str
    expected_urls: tuple[str, ...]

    def first_item(self) -> dict[str, Any]:
        """What the pipeline's first stage is given (``QSL.py``'s sample, and the index)."""
        return {"index": self.index, "query": self.query, "ground_truth": self.ground_truth,
                "expected_urls": list(self.expected_urls)}


def tsv_path(path: Path) -> Path:
    """The TSV itself, or ``frames_dataset.tsv`` in the folder ``path`` names."""
    path = Path(path)
    return path / "frames_dataset.tsv" if path.is_dir() else path


def read_frames(path: Path) -> list[Question]:
    """Every question of a FRAMES TSV (a file, or a folder holding ``frames_dataset.tsv``)."""
    path = tsv_path(path)
    lines = (text + "\n" for _, text in iter_lines(path, "the FRAMES questions", limit=LINE_LIMIT,
                                                   error=DatasetError))
    reader = csv.reader(lines, delimiter="\t")
    try:
        header = next(reader)
    except StopIteration:
        raise DatasetError(f"{path}: empty file; expected a header with the columns {', '.join(REQUIRED)}") from None
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise DatasetError(f"{path}, line 1: no column {', '.join(map(repr, missing))} in the header "
                           f"(found: {', '.join(header)})")
    links = [i for i, c in enumerate(header) if c.startswith(LINK_PREFIX)]
    out: list[Question] = []
    line = reader.line_num
    try:
        for cells in reader:
            start, line = line + 1, reader.line_num
            if not cells or all(not c.strip() for c in cells):
                continue  # pandas skips blank lines
            if len(cells) != len(header):
                first = min(len(cells), len(header))  # the first column the row and the header disagree on
                what = (f"column {first + 1} ({header[first]!r}) is missing" if len(cells) < len(header)
                        else f"column {first + 1} has no header")
                raise DatasetError(f"{path}, line {start}: {len(cells)} tab-separated cells, the header has "
                                   f"{len(header)}: {what}")
            row = dict(zip(header, cells, strict=True))
            for column in REQUIRED:
                if not row[column].strip():
                    raise DatasetError(f"{path}, line {start}, column {header.index(column) + 1} ({column!r}): "
                                       f"empty; every question needs a prompt and an answer")
            urls = tuple(cells[i] for i in links if cells[i] != "")
            out.append(Question(len(out), row["Prompt"], row["Answer"], urls))
    except csv.Error as e:
        raise DatasetError(f"{path}, line {reader.line_num}: not a TSV row: {e}") from e
    if not out:
        raise DatasetError(f"{path}: no questions below the header")
    return out


def ground_truth_by_query(questions: list[Question]) -> dict[str, Question]:
    """``accuracy_eval.py``'s ``query_to_gt``: keyed by the prompt text, a later duplicate wins as in its dict."""
    return {q.query: q for q in questions}


def run_questions(ctx: dict[str, Any]) -> list[Question]:
    """The questions of a run (the e2e-rag-qna manifests' ``dataset.init``): ``--dataset-path`` names
    frames_dataset.tsv or its folder; without it a manifest with the attribute ``synthetic_e2e_rag`` uses the
    synthetic set in the cache (``dataset synth e2e-rag``, written there the first time), and ``ctx["dataset_path"]``
    is set to it, which the accuracy metric then scores against."""
    root = ctx.get("dataset_path")
    if not root and (ctx.get("attributes") or {}).get("synthetic_e2e_rag"):
        from mlharness.tasks.e2e_rag.synth import DOCS, TSV, write_synthetic_frames
        from mlharness.tasks.generative import synthetic_cache

        root = synthetic_cache("e2e-rag")
        if not (Path(root) / TSV).is_file() or not (Path(root) / DOCS / "url_mapping.json").is_file():
            write_synthetic_frames(Path(root))
        ctx["dataset_path"] = str(root)
    if not root:
        raise DatasetError("e2e-rag-qna needs its questions: --dataset-path names frames_dataset.tsv or the folder "
                           "holding it, as 'mlharness dataset synth e2e-rag' or the official download leave it")
    return read_frames(Path(root))
