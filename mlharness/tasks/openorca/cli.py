"""``mlharness dataset synth openorca`` and ``mlharness accuracy openorca``.

Kept light: pandas, transformers, nltk and rouge-score are imported inside the handlers so ``mlharness --help``
stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from mlharness.tasks.generative_cli import add_accuracy, add_synth, print_result, write_synth


def register(synth: Any, prepare: Any, accuracy: Any) -> None:
    add_synth(synth, "openorca", "a synthetic llama2-70b set (open_orca_gpt4_tokenized_llama pickle)",
              "Write open_orca_gpt4_tokenized_llama.sampled_24576.pkl in the official layout (a pandas DataFrame: "
              "id, system_prompt, question, output, input, tok_input, tok_output, origin, tok_input_length, "
              "tok_output_length) with the tokenizer that made the token columns in tokenizer/; the "
              "llama2-70b-99.9-oracle model scores ROUGE 100 on it.", "number of samples (default: 64)", cmd_synth,
              tokenizer_help="a checkpoint folder whose tokenizer encodes the prompts and answers (default: the "
                             "tiny Llama 2 shaped tokenizer of llama2-70b-99.9-random, trained locally)")
    add_accuracy(accuracy, "openorca", "ROUGE of a llama2-70b accuracy log (evaluate-accuracy.py)",
                 "Score an mlperf_log_accuracy.json of int32 token ids against the OpenOrca pickle as the official "
                 "language/llama2-70b/evaluate-accuracy.py does, offline, and print its result (the content of "
                 "accuracy.txt).", "--dataset-file", "open_orca_gpt4_tokenized_llama.sampled_24576.pkl",
                 cmd_accuracy)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.openorca.dataset import DATASET_FILE
    from mlharness.tasks.openorca.synth import DEFAULT_COUNT, write_synthetic_openorca

    return write_synth(args, console, write_synthetic_openorca, DEFAULT_COUNT,
                       f" to {{out}} ({DATASET_FILE}, tokenizer/)", tokenizer=args.tokenizer)


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.openorca.metric import score_log

    return print_result(score_log(args.log, args.dataset_file, args.tokenizer, args.dtype))
