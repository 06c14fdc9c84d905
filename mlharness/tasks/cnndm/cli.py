"""``mlharness dataset synth cnndm`` and ``mlharness accuracy cnndm``.

Kept light: transformers, nltk and rouge-score are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    p = synth.add_parser("cnndm", help="a synthetic llama3.1-8b set (cnn_eval.json, sample_cnn_eval_5000.json)",
                         description="Write cnn_eval.json and sample_cnn_eval_5000.json in the official layout "
                                     "(instruction, input, tok_input, output) with the tokenizer that made "
                                     "tok_input in tokenizer/; the llama3.1-8b-oracle model scores ROUGE 100 on it.")
    p.add_argument("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)")
    p.add_argument("--count", type=int, default=None, help="number of samples (default: 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer", type=Path, default=None, help="a checkpoint folder whose tokenizer encodes the "
                   "prompts (default: the tiny tokenizer of llama3.1-8b-random, trained locally)")
    p.add_argument("--force", action="store_true", help="write into a folder that already has files")
    p.set_defaults(func=cmd_synth)

    a = accuracy.add_parser("cnndm", help="ROUGE of a llama3.1-8b accuracy log (evaluation.py)",
                            description="Score an mlperf_log_accuracy.json of int32 token ids against cnn_eval.json "
                                        "as the official language/llama3.1-8b/evaluation.py does, offline, and "
                                        "print its result (the content of accuracy.txt).")
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json")
    a.add_argument("--dataset-file", type=Path, required=True, help="cnn_eval.json (or sample_cnn_eval_5000.json)")
    a.add_argument("--tokenizer", type=Path, required=True, help="the model's checkpoint folder (its tokenizer)")
    a.add_argument("--dtype", default="int32", choices=("int32", "int64"), help="response dtype (default: int32)")
    a.set_defaults(func=cmd_accuracy)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.cnndm.synth import DEFAULT_COUNT, write_synthetic_cnndm
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    count = args.count if args.count is not None else DEFAULT_COUNT
    out = write_synthetic_cnndm(args.out, count=count, seed=args.seed, tokenizer=args.tokenizer)
    console.print(f"wrote {count} samples to {out} (cnn_eval.json, sample_cnn_eval_5000.json, tokenizer/)",
                  highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.cnndm.metric import score_log

    result = score_log(args.log, args.dataset_file, args.tokenizer, args.dtype)
    sys.stdout.write(result.text)  # exactly what accuracy.txt holds
    sys.stdout.flush()
    return 0
