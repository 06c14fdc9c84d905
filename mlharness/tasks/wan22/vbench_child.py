"""The VBench scorer, run as a script by vbench's own Python (``vbench_run.py`` starts it): it imports nothing of
mlharness unless told to use the stand-ins, so it runs in an environment that has only vbench.

``python vbench_child.py JOB.json OUT.json``. The job names the folder of written videos (``<prompt>-0.mp4``, as
the reference's ``run_inference.py`` names them), the dimensions, where to write VBench's results, and ``scorer``:
``vbench`` runs ``VBench.evaluate`` exactly as the reference's ``evaluate.py`` does (``vbench_standard`` mode,
networks read from ``VBENCH_CACHE_DIR``, ``--load_ckpt_from_local=True``); ``stand-in`` scores the same files with
mlharness's deterministic stand-ins against the reference videos the job names (for tests, where the networks
cannot be downloaded). OUT.json is ``{"scorer": ..., "results": {dimension: [average, [per-video results]]}}``.
"""

import json
import sys
from pathlib import Path


def run_vbench(job):
    from importlib.metadata import version

    import torch
    from vbench import VBench
    from vbench.distributed import dist_init

    dist_init()  # the reference launches it with torch.distributed.run; one process is a world of one
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    import vbench as package

    full_info = str(Path(package.__file__).parent / "VBench_full_info.json")
    out = Path(job["output"])
    out.mkdir(parents=True, exist_ok=True)
    VBench(device, full_info, str(out)).evaluate(videos_path=job["videos"], name="results_mlharness",
                                                 dimension_list=job["dimensions"], local=True,
                                                 mode="vbench_standard")
    results = json.loads((out / "results_mlharness_eval_results.json").read_text(encoding="utf-8"))
    return f"vbench {version('vbench')}", results


def read_mp4(path):
    import cv2
    import numpy as np

    capture, frames = cv2.VideoCapture(str(path)), []
    try:
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            frames.append(frame[..., ::-1])  # BGR -> RGB
    finally:
        capture.release()
    if not frames:
        raise ValueError(f"{path}: no frame could be read")
    return np.stack(frames)


def run_stand_ins(job):
    import numpy as np

    from mlharness.fileguard import DATA_FILE_LIMIT, load_npy
    from mlharness.tasks.wan22.scorers import stand_in_scorers

    scorers = stand_in_scorers(tuple(job["dimensions"]))
    rows = {s.dimension: [] for s in scorers}
    for entry in job["items"]:
        video = read_mp4(Path(job["videos"]) / entry["file"])
        # a reference video is 224 MiB at 720p (81 frames of 1280 x 720 x 3 bytes): 1 GiB holds it with room
        reference = load_npy(Path(entry["reference"]), "the reference video", DATA_FILE_LIMIT)
        for scorer in scorers:
            rows[scorer.dimension].append({"video_path": entry["file"],
                                           "video_results": scorer.score(video, entry["prompt"], reference)})
    return "stand-in", {d: [float(np.mean([r["video_results"] for r in v])), v] for d, v in rows.items()}


def main(argv):
    job = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    scorer, results = (run_vbench if job["scorer"] == "vbench" else run_stand_ins)(job)
    Path(argv[2]).write_text(json.dumps({"scorer": scorer, "results": results}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
