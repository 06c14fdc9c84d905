"""Harness overhead vs the bare framework and LoadGen's own floor (see mlharness/bench.py).

    .venv/bin/python scripts/bench_overhead.py [--manifest resnet50-random] [--quick] [--json]

Equivalent to `mlharness bench overhead ...`. Without --dataset-path a synthetic ImageNet is generated in the
cache for manifests that read the imagenet dataset.
"""

import sys

from mlharness.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "overhead", *sys.argv[1:]]))
