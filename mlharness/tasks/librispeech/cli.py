"""``mlharness dataset synth librispeech`` and ``mlharness accuracy librispeech``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mlharness.tasks.commands import TaskCommands, accuracy, opt, synth


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.librispeech.synth import DEFAULT_COUNT, write_synthetic_librispeech
    from mlharness.userfiles import check_free

    check_free(args.out, args.force)
    count = args.count if args.count is not None else DEFAULT_COUNT
    out = write_synthetic_librispeech(args.out, count=count, seed=args.seed, use_espeak=False if args.tones else None)
    from mlharness.errors import DatasetError
    from mlharness.fileguard import read_text_bounded
    from mlharness.tasks.librispeech.synth import SYNTH_INFO

    # the one-line record write_synthetic_librispeech has just written
    speech = read_text_bounded(out / SYNTH_INFO, "synthetic LibriSpeech record", 1 << 20, error=DatasetError)
    console.print(f"wrote {count} clips to {out} (dev-all-repack.json, dev-all-repack/): {speech}",
                  highlight=False, soft_wrap=True)
    return 0


def cmd_accuracy(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.librispeech.dtype import resolve_dtype
    from mlharness.tasks.librispeech.metric import score_log

    dtype, source = resolve_dtype(args.log, args.dtype)
    if not args.dtype:
        print(f"label indices read as {dtype}: {source}", file=sys.stderr)
    result = score_log(args.log, args.manifest, dtype, args.dataset_dir)
    sys.stdout.write(result.text)
    sys.stdout.flush()
    return 0


COMMANDS = TaskCommands(
    synth=[synth("librispeech", "a synthetic whisper set (dev-all-repack.json + 16 kHz WAV clips)",
                 "Write dev-all-repack.json and dev-all-repack/*.wav in the layout of the whisper reference's "
                 "download_dataset.sh: speech by espeak-ng where it is installed, else tones; transcripts from a "
                 "word list.", cmd_synth, count=None, count_help="number of clips (default: 16)",
                 options=[opt("--tones", action="store_true", help="tones instead of espeak-ng speech")])],
    accuracy=[accuracy("librispeech", "WER of a whisper accuracy log (accuracy_eval.py)",
                       "Score an mlperf_log_accuracy.json of label indices against dev-all-repack.json as "
                       "speech2text/accuracy_eval.py does and print its line (the content of accuracy.txt).",
                       cmd_accuracy, options=[
        opt("--manifest", type=Path, required=True, help="dev-all-repack.json"),
        opt("--dataset-dir", type=Path, default=None,
            help="the folder the clips' names are relative to (default: the manifest's folder)"),
        opt("--dtype", default=None, choices=("int8", "int16", "int32", "int64"),
            help="width of the label indices (default: the response element type recorded in the "
                 "mlharness_run.json beside the log, else inferred from the log; the reference SUT and the whisper "
                 "manifests write int64)")])],
)
register = COMMANDS.register
