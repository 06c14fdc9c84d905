"""``mlharness dataset synth dlrm-v3``, ``mlharness accuracy dlrm-v3`` and ``mlharness accuracy dlrm-v3-test08``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import FORCE, Command, TaskCommands, opt


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


COMMANDS = TaskCommands(
    synth=[Command("dlrm-v3", "a synthetic time-ordered stream of user histories (the reference's streaming layout)",
                   "Write the file layout of the reference's streaming_synthetic_data.py (0.csv, offset.csv, "
                   "ts_0_<ts>.csv, requests_per_ts.csv, users_cumsum_per_ts.csv, requests_per_ts_offset.csv) and "
                   "dataset.json: --queries-per-ts users, each requested at each of --timestamps inference "
                   "timestamps; checked as a run checks it.", cmd_synth, (
        opt("--out", type=Path, required=True),
        opt("--timestamps", type=int, default=4),
        opt("--queries-per-ts", type=int, default=8),
        opt("--seed", type=int, default=0),
        FORCE))],
    # these two had no description: None, as add_parser's default
    accuracy=[Command("dlrm-v3", "NE, ACC and gAUC of an accuracy log (recommendation/dlrm_v3/accuracy.py)",
                      None, cmd_accuracy,
                      (opt("--log", type=Path, required=True, help="mlperf_log_accuracy.json"),)),
              Command("dlrm-v3-test08", "TEST08 verification (compliance/TEST08/run_verification.py)",
                      None, cmd_test08, (
        opt("-r", "--reference-accuracy", type=Path, required=True),
        opt("-t", "--test-accuracy", type=Path, required=True),
        opt("--tolerance", type=float, default=0.001)))],
)
register = COMMANDS.register
