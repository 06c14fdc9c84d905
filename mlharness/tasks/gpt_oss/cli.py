"""``mlharness dataset synth gpt-oss`` and ``mlharness accuracy gpt-oss``.

Kept light: pandas, transformers and openai-harmony are imported inside the handlers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    p = synth.add_parser("gpt-oss", help="a synthetic gpt-oss-120b set (acc/, perf/ parquet files)",
                         description="Write acc/acc_eval_inputs.parquet, perf/perf_eval_ref.parquet and "
                                     "acc/acc_eval_compliance_gpqa.parquet in the official layout (dataset, "
                                     "ground_truth, tok_input: Harmony prompts) with their tokenizer in tokenizer/; "
                                     "the gpt-oss-120b-oracle model scores exact_match 100 on it.")
    p.add_argument("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)")
    p.add_argument("--count", type=int, default=None, help="samples per file (default: 24)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="write into a folder that already has files")
    p.set_defaults(func=cmd_synth)

    a = accuracy.add_parser("gpt-oss", help="exact_match of a gpt-oss-120b accuracy log (eval_mlperf_accuracy.py)",
                            description="Score an mlperf_log_accuracy.json of int32 token ids against a reference "
                                        "data file as the official eval_mlperf_accuracy.py does, and print what it "
                                        "prints (the content of accuracy.txt).")
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json")
    a.add_argument("--reference-data", type=Path, required=True, help="the parquet (or pickle) data file")
    a.add_argument("--tokenizer", type=Path, required=True, help="the model's tokenizer folder")
    a.set_defaults(func=cmd_accuracy)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.gpt_oss.synth import DEFAULT_COUNT, write_synthetic_gpt_oss
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    count = args.count if args.count is not None else DEFAULT_COUNT
    out = write_synthetic_gpt_oss(args.out, count=count, seed=args.seed)
    console.print(f"wrote {count} samples per file to {out} (acc/acc_eval_inputs.parquet, perf/perf_eval_ref.parquet, "
                  f"acc/acc_eval_compliance_gpqa.parquet, tokenizer/)", highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.gpt_oss.metric import score_log

    result = score_log(args.log, args.reference_data, args.tokenizer)
    sys.stdout.write(result.text)  # exactly what accuracy.txt holds
    sys.stdout.flush()
    return 0
