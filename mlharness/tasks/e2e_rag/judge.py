"""e2e-rag-qna's LLM judge: any OpenAI-compatible chat endpoint asked ``accuracy_eval.py``'s question, its reply read
as ``call_judge`` reads it.

The request is the reference's to the byte: :data:`JUDGE_PROMPT` (copied from ``e2e-rag/accuracy_eval.py``; it is
data, its sha256 is checked by the tests), one user message, ``temperature`` 0.0, ``max_tokens`` 1024, a bearer key.
The reply's ``choices[0].message.content`` is stripped, a fenced code block's body taken where there is one, then
the outermost ``{...}`` parsed as JSON and its ``correct`` read for truth, as the reference does.

Where the reference differs: ``call_judge`` turns every failure (no JSON in the reply, JSON that does not parse, an
HTTP error, a timeout) into ``{"correct": False}``, so a judge that is down scores as a pipeline that answers
wrong. Here such a reply raises :class:`JudgeError`, a :class:`StageError` of stage ``judge`` naming the sample
(exit 3); ``errors="wrong"`` reproduces the reference's counting and the summary says how many were counted so.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from mlharness.kinds.pipeline.stage import StageError

DEFAULT_JUDGE_URL = "http://127.0.0.1:8123/v1/chat/completions"  # accuracy_eval.py's defaults
DEFAULT_JUDGE_MODEL = "gpt-oss-20b"
DEFAULT_TIMEOUT_S = 60.0  # accuracy_eval.py's requests timeout
ERROR_MODES = ("raise", "wrong")

JUDGE_PROMPT = """You are grading whether an LLM answer is correct against a ground truth answer.

QUESTION: {question}

GROUND TRUTH ANSWER: {ground_truth}

LLM ANSWER: {llm_answer}

Grade in two steps.

STEP 1 - If the LLM answer is empty, "Unknown", "I don't know", "cannot be determined", or otherwise does not commit to an answer, then it is WRONG: output correct=false immediately and do not go to step 2.

STEP 2 - Otherwise compare it to the ground truth by meaning, not wording. correct=true only if it supplies every fact the ground truth requires and each clearly matches; if you are unsure or the match is only partial, output correct=false. Rules:
- If the ground truth is a list or has multiple parts, an answer missing any of them is correct=false.
- Every number, date, and name must match the ground truth; a different or differently-rounded value is correct=false, a different name is correct=false.
- Do NOT penalize harmless extras or omissions when the required facts match: a missing suffix like "Inc.", an added state/country, a full middle name, missing units when the number is right, or a briefer/longer phrasing.

Return your evaluation in JSON format:
{{
    "correct": true/false,
    "reasoning": "brief explanation"
}}
"""


class JudgeError(StageError):
    """The judge gave no verdict for one sample (no reply in time, an HTTP error, a reply without its JSON)."""

    def __init__(self, message: str, sample: int | None = None):
        super().__init__("judge", message, sample)


@dataclass(frozen=True)
class Verdict:
    correct: bool  # truthiness of the reply's "correct", as accuracy_eval.py counts it
    reasoning: str
    error: str | None = None  # set when errors="wrong" counted a failed call as wrong


def judge_payload(question: str, ground_truth: str, llm_answer: str, model: str) -> dict[str, Any]:
    """The request body ``call_judge`` posts."""
    prompt = JUDGE_PROMPT.format(question=question, ground_truth=ground_truth, llm_answer=llm_answer)
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0.0,
            "max_tokens": 1024}


def parse_reply(content: str) -> dict[str, Any]:
    """The JSON verdict in a judge's message, extracted as ``call_judge`` extracts it; ValueError when there is
    none (the reference would count the answer wrong)."""
    content = content.strip()
    if "```" in content:
        block = re.search(r"```(?:json)?\s*\n?(.*?)\n?```", content, re.DOTALL)
        if block:
            content = block.group(1).strip()
    found = re.search(r"\{.*\}", content, re.DOTALL)
    if not found:
        raise ValueError("no JSON object in the judge's reply")
    try:
        verdict = json.loads(found.group(0))
    except json.JSONDecodeError as e:
        raise ValueError(f"the judge's JSON does not parse: {e}") from e
    if not isinstance(verdict, dict) or "correct" not in verdict:
        raise ValueError("the judge's JSON has no 'correct' key")
    return verdict


class JudgeClient:
    """Posts one question at a time to ``url`` (thread-safe: one connection per call, as ``requests.post``)."""

    def __init__(self, url: str = DEFAULT_JUDGE_URL, model: str = DEFAULT_JUDGE_MODEL,
                 timeout_s: float = DEFAULT_TIMEOUT_S, api_key: str = "sk-or-v1-****", errors: str = "raise"):
        if errors not in ERROR_MODES:
            raise ValueError(f"judge errors must be one of {', '.join(ERROR_MODES)}, got {errors!r}")
        self.url, self.model, self.timeout_s, self.api_key, self.errors = url, model, timeout_s, api_key, errors

    def _post(self, body: dict[str, Any]) -> str:
        request = urllib.request.Request(self.url, data=json.dumps(body).encode("utf-8"), method="POST",
                                         headers={"Authorization": f"Bearer {self.api_key}",
                                                  "Content-Type": "application/json"})
        deadline = time.monotonic() + self.timeout_s
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                # read in pieces against one deadline: the socket's timeout bounds each wait, so a server that
                # trickles its reply byte by byte is still cut off (at most one more wait past the deadline)
                chunks: list[bytes] = []
                while chunk := response.read1(65536):
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise TimeoutError
                raw = b"".join(chunks)
        except urllib.error.HTTPError as e:
            raise ValueError(f"{self.url} answered HTTP {e.code}") from e
        except TimeoutError as e:
            raise ValueError(f"no answer from {self.url} within {self.timeout_s:g} s") from e
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):
                raise ValueError(f"no answer from {self.url} within {self.timeout_s:g} s") from e
            raise ValueError(f"cannot reach {self.url}: {reason}") from e
        try:
            return json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ValueError(f"{self.url} did not answer a chat completion (choices[0].message.content)") from e

    def judge(self, question: str, ground_truth: str, llm_answer: str, sample: int | None = None) -> Verdict:
        """The judge's verdict on one answer; a failure raises :class:`JudgeError` naming ``sample``, or, with
        ``errors="wrong"``, is a wrong verdict that records the failure."""
        try:
            verdict = parse_reply(self._post(judge_payload(question, ground_truth, llm_answer, self.model)))
        except ValueError as e:
            if self.errors == "wrong":
                return Verdict(False, f"Judge error: {e}", error=str(e))
            raise JudgeError(str(e), sample) from e
        return Verdict(bool(verdict.get("correct", False)), str(verdict.get("reasoning", "")))
