"""The parent side of the VBench subprocess: the videos are written as files one at a time while the log is read
(``<prompt>-0.mp4``, the names VBench's ``vbench_standard`` mode matches prompts by), then ``vbench_child.py``
scores the folder in vbench's own Python and returns ``{dimension: [average, [per-video results]]}`` as JSON,
which the metric averages as ``run_evaluation.py`` does. Nothing of a video stays in this process's memory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mlharness.errors import AccuracyError
from mlharness.fileguard import DATA_FILE_LIMIT, read_json
from mlharness.tasks.side_env import run_captured

CHILD = Path(__file__).with_name("vbench_child.py")
TIMEOUT_S = 24 * 3600.0  # 248 videos of 81 frames at 720p on one GPU take hours
JOB, OUT = "job.json", "scores.json"


def video_name(prompt: str) -> str:
    """The file name ``run_inference.py`` gives a prompt's video (the first of its samples)."""
    return f"{prompt}-0.mp4"


def score_files(python: str, folder: Path, dimensions: tuple[str, ...], scorer: str,
                items: list[dict[str, Any]] | None = None, weights_dir: Path | None = None,
                timeout_s: float = TIMEOUT_S) -> tuple[str, dict[str, Any]]:
    """Run the child over ``folder``'s videos; returns (what scored, results). ``scorer`` is ``vbench`` or
    ``stand-in`` (whose ``items`` name each file, prompt and reference video)."""
    folder = Path(folder)
    work = folder.parent
    job = {"scorer": scorer, "videos": str(folder), "dimensions": list(dimensions), "output": str(work),
           "items": items or []}
    (work / JOB).write_text(json.dumps(job), encoding="utf-8")
    out = work / OUT
    out.unlink(missing_ok=True)
    env = dict(os.environ)
    if weights_dir is not None:
        env["VBENCH_CACHE_DIR"] = str(weights_dir)
    done = run_captured([python, str(CHILD), str(work / JOB), str(out)], timeout_s, env=env, cwd=work,
                        timed_out=f"the VBench scorer ({python}) did not finish in {timeout_s:g} s over {folder}",
                        cannot_run=f"the VBench scorer's Python {python} cannot be run")
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:]) or "(no output)"
        raise AccuracyError(f"the VBench scorer failed over {folder} (exit status {done.returncode}):\n{tail}")
    # the child's answer: the scores of a few dimensions over the videos, a few KiB per video
    answer = read_json(out, "the VBench scorer's answer", DATA_FILE_LIMIT, error=AccuracyError,
                       allow_nan=True)
    try:
        what, results = answer["scorer"], answer["results"]
    except (KeyError, TypeError) as e:
        raise AccuracyError(f"the VBench scorer wrote no readable {out}: {e}") from e
    missing = [d for d in dimensions if not (isinstance(results.get(d), list) and results[d])]
    if missing:
        raise AccuracyError(f"{out}: no score for the dimension(s) {', '.join(missing)}")
    return what, results
