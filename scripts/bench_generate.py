"""Harness overhead on a generative model vs the bare transformers engine (see mlharness/bench_generate.py).

    .venv/bin/python scripts/bench_generate.py [--manifest llama3.1-8b-random] [--quick] [--json]

Equivalent to `mlharness bench generate ...`: Offline tokens/s of the bare engine and of `mlharness run`, and the
TTFT/TPOT the harness adds in Server at a light load.
"""

import sys

from mlharness.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "generate", *sys.argv[1:]]))
