"""``mlharness dataset synth qwen3.6-27b``: the synthetic folder of both qwen3.6-27b data sets.

Kept light: the task's modules are imported inside the handler."""

from __future__ import annotations

import argparse
from typing import Any

from mlharness.tasks.commands import TaskCommands, synth
from mlharness.tasks.generative_cli import write_synth


def cmd_synth(args: argparse.Namespace, console: Any) -> int:
    from mlharness.tasks.qwen36.synth import AGENTIC_SESSIONS, write_synthetic_qwen36

    return write_synth(args, console, write_synthetic_qwen36, AGENTIC_SESSIONS,
                       " (agentic sessions; and the synthetic BFCL v4 entries) to {out}")


COMMANDS = TaskCommands(
    synth=[synth("qwen3.6-27b", "a synthetic qwen3.6-27b folder (BFCL v4 entries and an agentic trace)",
                   "Write the layout --dataset-path takes for qwen3.6-27b: data/BFCL_v4_<subset>.json with "
                   "data/possible_answer/ (synthetic BFCL v4 single-turn entries, the accuracy sessions) and "
                   "agentic_coding_2.5h.jsonl (a small trace in the MLCommons endpoints agentic format, the "
                   "performance sessions). With the default count and seed it is the folder the -oracle and -random "
                   "manifests make in the cache, and qwen3.6-27b-oracle scores 100 on it.", cmd_synth, count=None,
                 count_help="agentic sessions (default: 4)")],
)
register = COMMANDS.register
