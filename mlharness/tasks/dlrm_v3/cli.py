"""``mlharness dataset synth dlrm-v3``, ``mlharness accuracy dlrm-v3`` and ``mlharness accuracy dlrm-v3-test08``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    p = synth.add_parser("dlrm-v3", help="a synthetic time-ordered stream of user histories (the reference's "
                                         "streaming layout)",
                         description="Write the file layout of the reference's streaming_synthetic_data.py (0.csv, "
                                     "offset.csv, ts_0_<ts>.csv, requests_per_ts.csv, users_cumsum_per_ts.csv, "
                                     "requests_per_ts_offset.csv) and dataset.json: --queries-per-ts users, each "
                                     "requested at each of --timestamps inference timestamps; checked as a run "
                                     "checks it.")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--timestamps", type=int, default=4)
    p.add_argument("--queries-per-ts", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="write into a folder that already has files")
    p.set_defaults(func=cmd_synth)
    a = accuracy.add_parser("dlrm-v3", help="NE, ACC and gAUC of an accuracy log (recommendation/dlrm_v3/accuracy.py)")
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json")
    a.set_defaults(func=cmd_accuracy)
    t = accuracy.add_parser("dlrm-v3-test08", help="TEST08 verification (compliance/TEST08/run_verification.py)")
    t.add_argument("-r", "--reference-accuracy", type=Path, required=True)
    t.add_argument("-t", "--test-accuracy", type=Path, required=True)
    t.add_argument("--tolerance", type=float, default=0.001)
    t.set_defaults(func=cmd_test08)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.dlrm_v3.synth import write_stream
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    path = write_stream(args.out, num_ts=args.timestamps, queries_per_ts=args.queries_per_ts, seed=args.seed)
    console.print(f"wrote {args.timestamps * args.queries_per_ts} queries over {args.timestamps} inference "
                  f"timestamps to {path}", highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.dlrm_v3.metric import accuracy_text

    sys.stdout.write(accuracy_text(args.log)[0])
    return 0


def cmd_test08(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.dlrm_v3.test08 import verify

    ok, text = verify(args.reference_accuracy, args.test_accuracy, args.tolerance)
    sys.stdout.write("Verifying accuracy. This might take a while...\n" + text + "TEST08 verification complete\n")
    return 0 if ok else 1
