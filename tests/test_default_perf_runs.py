"""Each built-in benchmark's default performance run: ``mlharness run --manifest NAME --scenario S --mode performance``
with nothing but a short ``--min-duration-ms`` (and the ``--dataset-path`` a dataset needs), so the run measures the
expected performance itself (calibration) before LoadGen starts. It exits 0 and its summary shows LoadGen's
result. A crash on this path (like a predictor's timing hook that calibration calls differently from the SUT) cannot
land unseen.

S is the benchmark's first required scenario (the checker's required scenarios: SingleStream for edge benchmarks,
Offline for the datacenter LLMs and whisper). The variants that run here without downloads are covered: every
oracle, the demo, and the random models whose engines the oracles do not use. Default runs covered elsewhere:
``llama3.1-8b-random`` Offline (test_round_suite), ``stable-diffusion-xl-random`` (``submission run``, which makes
the same calibrated runs, in test_sdxl_submission). Left out for their length on a CPU, not for a different path:
the random ONNX vision models (``yolo-random`` SingleStream: at least 100 queries of about 2 s each on a busy
2-core host, which the run's estimate line announces), whose predictor and hooks the oracles run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.cli import cli

pytestmark = pytest.mark.slow  # each case is a whole run: calibration, then LoadGen (3 to 15 s on a busy host)

MIN_DURATION_MS = "300"

# the synthetic dataset a benchmark reads (mlharness dataset synth TASK --count N), as small as the run allows
DATASETS = {"imagenet": 16, "coco": 8, "openimages": 8, "coco-captions": 3, "kits19": 1}

CASES = [  # manifest, scenario, dataset, what else the default run of this manifest needs
    ("demo", "Offline", None, ()),
    ("resnet50-oracle", "SingleStream", "imagenet", ()),
    ("bert-oracle", "SingleStream", None, ()),
    ("3d-unet-oracle", "SingleStream", "kits19", ()),
    ("retinanet-oracle", "SingleStream", "openimages", ("--round", "v6.0")),  # a benchmark of v6.0 only
    ("yolo-oracle", "SingleStream", "coco", ()),
    ("llama3.1-8b-oracle", "Offline", None, ()),
    ("llama3.1-8b-edge-oracle", "SingleStream", None, ()),
    ("llama2-70b-99.9-oracle", "Offline", None, ()),
    ("deepseek-r1-oracle", "Offline", None, ()),
    ("gpt-oss-120b-oracle", "Offline", None, ()),
    ("whisper-oracle", "Offline", None, ()),
    ("whisper-random", "Offline", None, ()),  # the speech engine: calibration times its first samples
    ("stable-diffusion-xl-oracle", "SingleStream", "coco-captions", ()),
]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]):
    """The synthetic dataset folder of a task, written on first use (kits19 also pre-processed)."""
    made: dict[str, Path] = {}

    def get(task: str) -> Path:
        if task not in made:
            root = tmp_path_factory.mktemp(task)
            proc = cli(env, "dataset", "synth", task, "--out", str(root / "raw"), "--count", str(DATASETS[task]))
            assert proc.returncode == 0, proc.stdout + proc.stderr
            made[task] = root / "raw"
            if task == "kits19":
                proc = cli(env, "dataset", "prepare", "kits19", "--raw", str(root / "raw"), "--out",
                           str(root / "prep"))
                assert proc.returncode == 0, proc.stdout + proc.stderr
                made[task] = root / "prep"
        return made[task]

    return get


@pytest.mark.parametrize(("manifest", "scenario", "dataset", "extra"), CASES, ids=[c[0] for c in CASES])
def test_default_performance_run(env, tmp_path, datasets, manifest, scenario, dataset, extra):
    out = tmp_path / "out"
    args = ["run", "--manifest", manifest, "--scenario", scenario, "--mode", "performance", "--min-duration-ms",
            MIN_DURATION_MS, "--output", str(out), "--no-progress", *extra]
    if dataset is not None:
        args += ["--dataset-path", str(datasets(dataset))]
    proc = cli(env, *args, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "Traceback" not in text, text[-4000:]
    assert re.search(r"^\s*result\s+(VALID|INVALID)\s*$", proc.stdout, re.M), proc.stdout[-3000:]
    assert "Result is :" in (out / "mlperf_log_summary.txt").read_text()
    assert "LoadGen will issue" in proc.stderr, proc.stderr[-3000:]  # the run's estimate, from the calibrated figure
