"""One cold-start trial: ``python -m mlharness.measurement.coldstart_child SPEC``, a process of its own
started by ``mlharness coldstart`` with its spec as JSON text. It loads the manifest's model, answers one sample, then the same sample
``warm`` times more, and writes its timeline (CLOCK_MONOTONIC, which every process of the host shares) as JSON
to the spec's ``out`` path.

Only the standard library is imported before the first mark: the harness's own imports are a step of their own."""

from __future__ import annotations

import time

ENTERED = time.monotonic()  # the first statement the trial's process runs

import json  # noqa: E402 - after the entry mark, on purpose
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402


def main(spec_text: str) -> int:
    spec = json.loads(spec_text)
    marks = {"entered": ENTERED}
    import numpy as np

    from mlharness.measurement.direct import DirectModel

    marks["harness"] = time.monotonic()
    files = tuple(None if p is None else Path(p) for p in spec["files"])
    model = DirectModel(spec["manifest"], spec.get("dataset_path"), spec.get("count"), batch=1,
                        device=spec.get("device", "cpu"), threads=spec.get("threads"), scenario="SingleStream",
                        files=files, mark=lambda step: marks.__setitem__(step, time.monotonic()))
    try:
        model.load(1)
        marks["sample"] = time.monotonic()
        first = np.array([0])
        model.outputs(first)
        marks["first_answer"] = time.monotonic()
        warm = []
        for _ in range(int(spec["warm"])):
            t0 = time.perf_counter()
            model.outputs(first)
            warm.append(time.perf_counter() - t0)
    finally:
        model.close()
    with open(spec["out"], "w", encoding="utf-8") as f:
        json.dump({"pid": os.getpid(), "marks": marks, "warm_s": warm}, f)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    except Exception as e:
        from mlharness.errors import MLHarnessError

        if not isinstance(e, MLHarnessError):
            raise
        print(f"mlharness coldstart: {e}", file=sys.stderr)  # the parent shows it: no traceback for a known error
        sys.exit(2)
