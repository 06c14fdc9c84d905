"""``mlharness dataset synth cnndm`` and ``mlharness accuracy cnndm``.

Kept light: transformers, nltk and rouge-score are imported inside the handlers so ``mlharness --help`` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from mlharness.tasks.generative_cli import add_accuracy, add_synth, print_result, write_synth


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    add_synth(synth, "cnndm", "a synthetic llama3.1-8b set (cnn_eval.json, sample_cnn_eval_5000.json)",
              "Write cnn_eval.json and sample_cnn_eval_5000.json in the official layout (instruction, input, "
              "tok_input, output) with the tokenizer that made tok_input in tokenizer/; the llama3.1-8b-oracle model "
              "scores ROUGE 100 on it.", "number of samples (default: 64)", cmd_synth,
              tokenizer_help="a checkpoint folder whose tokenizer encodes the prompts (default: the tiny tokenizer "
                             "of llama3.1-8b-random, trained locally)")
    add_accuracy(accuracy, "cnndm", "ROUGE of a llama3.1-8b accuracy log (evaluation.py)",
                 "Score an mlperf_log_accuracy.json of int32 token ids against cnn_eval.json as the official "
                 "language/llama3.1-8b/evaluation.py does, offline, and print its result (the content of "
                 "accuracy.txt).", "--dataset-file", "cnn_eval.json (or sample_cnn_eval_5000.json)", cmd_accuracy)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.cnndm.synth import DEFAULT_COUNT, write_synthetic_cnndm

    return write_synth(args, console, write_synthetic_cnndm, DEFAULT_COUNT,
                       " to {out} (cnn_eval.json, sample_cnn_eval_5000.json, tokenizer/)", tokenizer=args.tokenizer)


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.cnndm.metric import score_log

    return print_result(score_log(args.log, args.dataset_file, args.tokenizer, args.dtype))
