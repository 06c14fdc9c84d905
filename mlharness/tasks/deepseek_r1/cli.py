"""``mlharness dataset synth deepseek-r1`` and ``mlharness accuracy deepseek-r1``.

Kept light: pandas, transformers and sympy are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    p = synth.add_parser("deepseek-r1", help="a synthetic deepseek-r1 set (mlperf_deepseek_r1_dataset_4388_fp8_eval"
                                             ".pkl)",
                         description="Write the deepseek-r1 dataset pickle in the official layout (dataset, question, "
                                     "text_input, tok_input, ground_truth, ...) with questions of the five kinds "
                                     "(GPQA, MMLU-Pro, MATH500, AIME, LiveCodeBench with tests) and the tokenizer "
                                     "that made tok_input in tokenizer/; deepseek-r1-oracle scores 100 on it.")
    p.add_argument("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)")
    p.add_argument("--count", type=int, default=None, help="number of samples (default: 20; kinds in turn)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="write into a folder that already has files")
    p.set_defaults(func=cmd_synth)

    a = accuracy.add_parser("deepseek-r1", help="exact_match of a deepseek-r1 accuracy log (eval_accuracy.py)",
                            description="Score an mlperf_log_accuracy.json of int32 token ids against the dataset "
                                        "pickle as the official language/deepseek-r1/eval_accuracy.py does (LiveCode"
                                        "Bench programs run in the sandbox) and print its result (accuracy.txt).")
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json")
    a.add_argument("--dataset-file", type=Path, required=True, help="the dataset pickle")
    a.add_argument("--tokenizer", type=Path, required=True, help="the model's checkpoint folder (its tokenizer)")
    a.add_argument("--dtype", default="int32", choices=("int32", "int64"), help="response dtype (default: int32)")
    a.add_argument("--lcb-tests", type=Path, default=None,
                   help="JSON question_id -> LiveCodeBench tests, for a dataset without an lcb_tests column")
    a.add_argument("--code-timeout", type=int, default=60, help="seconds per LiveCodeBench test (default: 60)")
    a.set_defaults(func=cmd_accuracy)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.deepseek_r1.synth import DEFAULT_COUNT, write_synthetic_deepseek
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    count = args.count if args.count is not None else DEFAULT_COUNT
    out = write_synthetic_deepseek(args.out, count=count, seed=args.seed)
    console.print(f"wrote {count} samples to {out} (mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl, tokenizer/)",
                  highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.deepseek_r1.metric import score_log
    from mlharness.tasks.deepseek_r1.sandbox import Limits

    result = score_log(args.log, args.dataset_file, args.tokenizer, args.dtype, args.lcb_tests,
                       Limits(timeout=args.code_timeout))
    sys.stdout.write(result.text)  # exactly what accuracy.txt holds
    sys.stdout.flush()
    return 0
