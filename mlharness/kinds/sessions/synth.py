"""A small agentic trace written from a seed: the stand-in for a real one in tests and in dry runs.

``synthetic_agentic_trace(path, sessions=3, turns=4, seed=0)`` writes a trace in the MLCommons endpoints agentic
format (what :func:`mlharness.kinds.sessions.traces.load_trace` reads as ``agentic``) with what makes such traces hard
to serve: a system prompt, a ``tools`` list with a bash-like function, assistant rows that call it with JSON
arguments (one step calls it twice, in parallel), tool rows with the results, think times between turns
(``delay_seconds``) and a final plain-text answer. Each session has ``turns`` client turns: the user's task, then
``turns - 1`` tool results. The same arguments write the same bytes, so a test can compare against a file.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SYSTEM = "You are a helpful assistant that can interact with a computer shell to solve programming tasks."
BASH_TOOL = {"type": "function", "function": {
    "name": "bash", "description": "Execute a bash command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string",
                                                                "description": "The bash command to execute"}},
                   "required": ["command"]}}}
TASKS = ("the parser drops the last line of a file without a trailing newline",
         "the cache never expires entries written with a zero lifetime",
         "the command line ignores --quiet when it is given twice",
         "the date formatter prints the month where the day belongs",
         "the retry loop sleeps once more after the last attempt")
FILES = ("src/parser.py", "src/cache.py", "src/cli.py", "src/dates.py", "src/retry.py", "tests/test_core.py")
COMMANDS = ("grep -n {word!r} {file}", "sed -n '{a},{b}p' {file}", "python -m pytest -x -q {file}",
            "cat {file}", "ls -la {dir}")
WORDS = ("line", "entry", "quiet", "month", "attempt", "newline", "lifetime", "format")


def synthetic_agentic_trace(path: str | Path, sessions: int = 3, turns: int = 4, seed: int = 0) -> Path:
    """Write the trace to ``path`` (JSON Lines) and return the path."""
    if sessions < 1 or turns < 1:
        raise ValueError(f"sessions and turns are at least 1, got sessions={sessions}, turns={turns}")
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for s in range(sessions):
        rows.extend(session_rows(f"synth-{seed}-{s:03d}", turns, rng))
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def session_rows(cid: str, turns: int, rng: random.Random) -> list[dict[str, Any]]:
    task = rng.choice(TASKS)
    rows: list[dict[str, Any]] = [{
        "conversation_id": cid, "turn": 1, "role": "user", "system": SYSTEM, "tools": [BASH_TOOL],
        "content": f"<pr_description>\nFix this: {task}.\n</pr_description>\nStart by looking at the code."}]
    calls = 0
    parallel = rng.randrange(1, turns) if turns > 2 else None  # the step that calls bash twice
    for step in range(1, turns + 1):
        n = len(rows) + 1
        if step == turns:
            rows.append({"conversation_id": cid, "turn": n, "role": "assistant",
                         "content": f"The fix is in place: {task} no longer happens, and the tests pass."})
            break
        ids = []
        tool_calls = []
        for _ in range(2 if step == parallel else 1):
            ids.append(f"functions.bash:{calls}")
            tool_calls.append({"id": ids[-1], "type": "function",
                               "function": {"name": "bash", "arguments": json.dumps({"command": command(rng)})}})
            calls += 1
        row: dict[str, Any] = {"conversation_id": cid, "turn": n, "role": "assistant", "tool_calls": tool_calls}
        if rng.random() < 0.5:
            row["reasoning_content"] = f"Look at {rng.choice(FILES)} next."
        rows.append(row)
        rows.append({"conversation_id": cid, "turn": n + 1, "role": "tool",
                     "delay_seconds": round(rng.uniform(0.05, 0.4), 6),
                     "tool_results": [{"tool_call_id": i, "content": tool_output(rng)} for i in ids]})
    return rows


def command(rng: random.Random) -> str:
    file = rng.choice(FILES)
    a = rng.randrange(1, 200)
    return rng.choice(COMMANDS).format(word=rng.choice(WORDS), file=file, a=a, b=a + rng.randrange(5, 40),
                                       dir=file.rsplit("/", 1)[0])


def tool_output(rng: random.Random) -> str:
    lines = [f"{rng.randrange(1, 400)}:    {rng.choice(WORDS)} = {rng.choice(WORDS)}_{rng.randrange(100)}"
             for _ in range(rng.randrange(1, 6))]
    return "<returncode>0</returncode>\n<output>\n" + "\n".join(lines) + "\n</output>"
