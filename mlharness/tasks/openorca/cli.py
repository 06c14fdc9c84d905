"""``mlharness dataset synth openorca`` and ``mlharness accuracy openorca``.

Kept light: pandas, transformers, nltk and rouge-score are imported inside the handlers so ``mlharness --help``
stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    p = synth.add_parser("openorca", help="a synthetic llama2-70b set (open_orca_gpt4_tokenized_llama pickle)",
                         description="Write open_orca_gpt4_tokenized_llama.sampled_24576.pkl in the official layout "
                                     "(a pandas DataFrame: id, system_prompt, question, output, input, tok_input, "
                                     "tok_output, origin, tok_input_length, tok_output_length) with the tokenizer "
                                     "that made the token columns in tokenizer/; the llama2-70b-99.9-oracle model "
                                     "scores ROUGE 100 on it.")
    p.add_argument("--out", type=Path, required=True, help="folder to write (use it as --dataset-path)")
    p.add_argument("--count", type=int, default=None, help="number of samples (default: 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer", type=Path, default=None, help="a checkpoint folder whose tokenizer encodes the "
                   "prompts and answers (default: the tiny Llama 2 shaped tokenizer of llama2-70b-99.9-random, "
                   "trained locally)")
    p.add_argument("--force", action="store_true", help="write into a folder that already has files")
    p.set_defaults(func=cmd_synth)

    a = accuracy.add_parser("openorca", help="ROUGE of a llama2-70b accuracy log (evaluate-accuracy.py)",
                            description="Score an mlperf_log_accuracy.json of int32 token ids against the OpenOrca "
                                        "pickle as the official language/llama2-70b/evaluate-accuracy.py does, "
                                        "offline, and print its result (the content of accuracy.txt).")
    a.add_argument("--log", type=Path, required=True, help="mlperf_log_accuracy.json")
    a.add_argument("--dataset-file", type=Path, required=True,
                   help="open_orca_gpt4_tokenized_llama.sampled_24576.pkl")
    a.add_argument("--tokenizer", type=Path, required=True, help="the model's checkpoint folder (its tokenizer)")
    a.add_argument("--dtype", default="int32", choices=("int32", "int64"), help="response dtype (default: int32)")
    a.set_defaults(func=cmd_accuracy)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.openorca.dataset import DATASET_FILE
    from mlharness.tasks.openorca.synth import DEFAULT_COUNT, write_synthetic_openorca
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    count = args.count if args.count is not None else DEFAULT_COUNT
    out = write_synthetic_openorca(args.out, count=count, seed=args.seed, tokenizer=args.tokenizer)
    console.print(f"wrote {count} samples to {out} ({DATASET_FILE}, tokenizer/)", highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.openorca.metric import score_log

    result = score_log(args.log, args.dataset_file, args.tokenizer, args.dtype)
    sys.stdout.write(result.text)  # exactly what accuracy.txt holds
    sys.stdout.flush()
    return 0
