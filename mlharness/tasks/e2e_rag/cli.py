"""``mlharness dataset synth e2e-rag`` and ``mlharness accuracy e2e-rag-qna``; the standard library only at import."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import TaskCommands, accuracy, opt, synth
from mlharness.tasks.generative_cli import print_result, write_synth


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.e2e_rag.synth import DEFAULT_COUNT, write_synthetic_frames

    return write_synth(args, console, write_synthetic_frames, DEFAULT_COUNT,
                       " (questions) to {out}/frames_dataset.tsv and their pages to {out}/doc_html/")


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.e2e_rag.metric import score_log

    options: dict[str, Any] = {"judge_errors": args.judge_errors, "num_workers": args.num_workers}
    for key, value in (("judge_url", args.judge_url), ("judge_model", args.judge_model),
                       ("judge_timeout_s", args.judge_timeout)):
        if value is not None:
            options[key] = value
    return print_result(score_log(args.log, args.dataset_path, options, args.records, args.results_out))


COMMANDS = TaskCommands(
    synth=[synth("e2e-rag", "a synthetic FRAMES set and its frozen corpus (e2e-rag-qna, e2e-rag-db layout)",
                 "Write frames_dataset.tsv (the FRAMES columns QSL.py and accuracy_eval.py read) and doc_html/ "
                 "(docs.tar.gz, url_mapping.json and the pages extracted beside them, named as download_docs.py "
                 "names them): two-hop questions whose answer is in the corpus only.", cmd_synth,
                 count=None, count_help="number of questions (default: 8)")],
    accuracy=[accuracy("e2e-rag-qna", "retrieval and LLM-judge accuracy of an e2e-rag-qna run (accuracy_eval.py)",
                       "Rebuild results.json from the run's pipeline_results.jsonl for the samples of its accuracy "
                       "log, ask the judge about every answer, and print accuracy_eval.py's summary and its "
                       "accuracy.txt line.", cmd_accuracy,
                       log_help="mlperf_log_accuracy.json (pipeline_results.jsonl beside it)", options=[
        opt("--dataset-path", type=Path, required=True, help="frames_dataset.tsv or its folder"),
        opt("--records", type=Path, default=None, help="pipeline_results.jsonl, if not beside the log"),
        opt("--judge-url", default=None, help="an OpenAI-compatible chat completions URL"),
        opt("--judge-model", default=None),
        opt("--judge-timeout", type=float, default=None, metavar="SECONDS", help="per call (default: 60)"),
        opt("--judge-errors", choices=("raise", "wrong"), default="raise",
            help="a judge call that fails: exit 3 naming the sample (default), or count the answer wrong as "
                 "accuracy_eval.py does (the summary says how many)"),
        opt("--num-workers", type=int, default=4, help="judge calls at a time (default: 4)"),
        opt("--results-out", type=Path, default=None, help="write the rebuilt results.json here")])],
)
register = COMMANDS.register
