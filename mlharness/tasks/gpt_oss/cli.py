"""``mlharness dataset synth gpt-oss`` and ``mlharness accuracy gpt-oss``.

Kept light: pandas, transformers and openai-harmony are imported inside the handlers."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import TaskCommands, opt
from mlharness.tasks.generative_cli import (
    code_limits,
    code_options,
    print_result,
    token_accuracy,
    token_synth,
    write_synth,
)


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.gpt_oss.synth import DEFAULT_COUNT, write_synthetic_gpt_oss

    return write_synth(args, console, write_synthetic_gpt_oss, DEFAULT_COUNT,
                       " per file to {out} (acc/acc_eval_inputs.parquet, perf/perf_eval_ref.parquet, "
                       "acc/acc_eval_compliance_gpqa.parquet, tokenizer/)")


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.gpt_oss.metric import score_log

    return print_result(score_log(args.log, args.reference_data, args.tokenizer, args.lcb_tests,
                                  code_limits(args)))


COMMANDS = TaskCommands(
    synth=[token_synth("gpt-oss", "a synthetic gpt-oss-120b set (acc/, perf/ parquet files)",
                       "Write acc/acc_eval_inputs.parquet, perf/perf_eval_ref.parquet and "
                       "acc/acc_eval_compliance_gpqa.parquet in the official layout (dataset, ground_truth, "
                       "tok_input: Harmony prompts; lcb_tests for LiveCodeBench problems) with their tokenizer in "
                       "tokenizer/; the gpt-oss-120b-oracle model scores exact_match 100 on it.", cmd_synth,
                       "samples per file (default: 24)")],
    accuracy=[token_accuracy("gpt-oss", "exact_match of a gpt-oss-120b accuracy log (eval_mlperf_accuracy.py)",
                             "Score an mlperf_log_accuracy.json of int32 token ids against a reference data file as "
                             "the official eval_mlperf_accuracy.py does (LiveCodeBench programs run in the "
                             "sandbox), and print what it prints (the content of accuracy.txt).", cmd_accuracy,
                             opt("--reference-data", type=Path, required=True,
                                 help="the parquet (or pickle) data file"),
                             tokenizer_help="the model's tokenizer folder", dtype=False,
                             options=code_options("a data file"))],
)
register = COMMANDS.register
