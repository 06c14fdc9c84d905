"""TEST06 (LLM output consistency), as ``compliance/TEST06/run_verification.py`` decides it, over the
``mlperf_log_accuracy.json`` of a performance run made with ``mlharness/audit/TEST06/audit.config`` (it logs a
seeded sample of about 100 responses):

- first token: outside Offline, the tokens LoadGen got with ``FirstTokenComplete`` (``token_data``) equal the
  first tokens of the sample's answer (``data``);
- EOS: no answer ends with two or more EOS tokens. The reference takes one EOS id (``-e``, Llama-2's 2 by
  default); here every EOS id of the model's tokenizer and generation config counts (Llama 3.1 has three), so a
  tail of mixed EOS ids fails too;
- length: ``token_count`` equals the number of tokens in ``data``.

:func:`verify` writes ``<scenario dir>/TEST06/verify_accuracy.txt`` in the reference's words (what the checker
reads) and copies the accuracy log to ``TEST06/accuracy/``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import SettingsError
from mlharness.fileguard import read_json
from mlharness.userfiles import ACCURACY_LOG_LIMIT, RECORD_LIMIT, read_log_text

DTYPES = {"int64": np.int64, "int32": np.int32, "int16": np.int16, "float32": np.float32}


@dataclass
class Test06Result:
    first_token: bool | None  # None: skipped (Offline)
    eos: bool
    length: bool
    problems: list[str]

    @property
    def passed(self) -> bool:
        return self.first_token is not False and self.eos and self.length

    def text(self) -> str:
        first = "Skipped" if self.first_token is None else str(self.first_token)
        return (f"First token check pass: {first}\nEOS check pass: {self.eos}\n"
                f"Sample length check pass: {self.length}\n"
                f"TEST06 verification {'complete' if self.passed else 'failed'}\n")


def ends_with_repeated_eos(tokens: np.ndarray, eos_ids: set[int]) -> bool:
    n = 0
    for t in tokens[::-1]:
        if int(t) not in eos_ids:
            break
        n += 1
    return n >= 2


def check_entries(entries: list[dict[str, Any]], scenario: str, eos_ids: set[int], dtype: str = "int32",
                  ) -> Test06Result:
    if dtype not in DTYPES:
        raise SettingsError(f"TEST06: dtype '{dtype}' is not one of {', '.join(DTYPES)}")
    dt = DTYPES[dtype]
    first_ok: bool | None = None if scenario == "Offline" else True
    eos_ok = length_ok = True
    problems: list[str] = []
    for e in entries:
        idx = e.get("qsl_idx")
        data = np.frombuffer(bytes.fromhex(e["data"]), dtype=dt)
        if first_ok is not None:
            first = np.frombuffer(bytes.fromhex(e.get("token_data", "")), dtype=dt)
            if first.size == 0 or not np.array_equal(first, data[: first.size]):
                first_ok = False
                problems.append(f"sample {idx}: the first tokens {first.tolist()[:4]} are not how its answer "
                                f"starts ({data.tolist()[:4]})")
        if ends_with_repeated_eos(data, eos_ids):
            eos_ok = False
            problems.append(f"sample {idx}: the answer ends with repeated EOS tokens ({data.tolist()[-3:]})")
        if "token_count" not in e or int(e["token_count"]) != data.size:
            length_ok = False
            problems.append(f"sample {idx}: token_count {e.get('token_count')} but {data.size} tokens logged")
    return Test06Result(first_ok, eos_ok, length_ok, problems)


def verify(run_dir: Path, scenario_dir: Path, scenario: str, eos_ids: set[int], dtype: str = "int32",
           ) -> Test06Result:
    """Verify the TEST06 run in ``run_dir`` and write ``scenario_dir/TEST06/{verify_accuracy.txt,accuracy/}``."""
    log = Path(run_dir) / "mlperf_log_accuracy.json"
    if not log.is_file():
        raise SettingsError(f"TEST06: {log} is missing; was the run made with the TEST06 audit config?")
    if not eos_ids:
        raise SettingsError("TEST06 needs the model's EOS token id(s): the tokenizer or generation config names none")
    entries = read_json(log, "TEST06: accuracy log", ACCURACY_LOG_LIMIT, error=SettingsError)
    result = check_entries(entries, scenario, set(eos_ids), dtype)
    out = Path(scenario_dir) / "TEST06"
    (out / "accuracy").mkdir(parents=True, exist_ok=True)
    (out / "verify_accuracy.txt").write_text(result.text())
    copy = out / "accuracy" / "mlperf_log_accuracy.json"
    if not copy.exists() or not copy.samefile(log):
        shutil.copy2(log, copy)
    return result


def eos_ids_of(model_dir: str | Path) -> set[int]:
    """Every EOS id a checkpoint folder declares: its generation config's ``eos_token_id`` (an int or a list, as
    Llama 3.1's [128001, 128008, 128009]), its config's, and its tokenizer's."""
    ids: set[int] = set()
    folder = Path(model_dir)
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            config = read_json(path, "model config", RECORD_LIMIT, error=SettingsError)
            value = config.get("eos_token_id") if isinstance(config, dict) else None
            ids.update([value] if isinstance(value, int) else [int(v) for v in value or []])
    if any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer_config.json")):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder))
        if tok.eos_token_id is not None:
            ids.add(int(tok.eos_token_id))
    return ids


def eos_ids_for_manifest(loaded: Any) -> set[int]:
    """The EOS ids of a generative manifest's model: ``eos_token_ids`` / ``stop_token_ids`` of its framework
    options or ``generation`` section, and those of its tokenizer folder (``options.tokenizer``, else the
    model folder)."""
    m = loaded.model
    options = dict(m.framework.options)
    ids: set[int] = set()
    generation = getattr(m, "generation", None)
    for source in (options, options.get("generation") or {}, generation.model_dump() if generation else {}):
        for key in ("eos_token_ids", "eos_token_id", "stop_token_ids"):
            value = source.get(key) if isinstance(source, dict) else None
            if value is not None:
                ids.update([int(value)] if isinstance(value, int) else [int(v) for v in value])
    folder = options.get("tokenizer")
    if folder is None:
        from mlharness.run.factory import resolve_model_file

        path = resolve_model_file(loaded)
        folder = path if path is not None and Path(path).is_dir() else None
    if folder is not None:
        ids |= eos_ids_of(Path(loaded.directory) / folder if not Path(folder).is_absolute() else folder)
    return ids


def passes(verify_file: Path) -> bool:
    """What the checker requires of verify_accuracy.txt: the three checks pass (first token may be skipped)."""
    lines = [line.strip() for line in read_log_text(verify_file, "TEST06 verification").splitlines()]
    first = "First token check pass: True" in lines or "First token check pass: Skipped" in lines
    return first and "EOS check pass: True" in lines and "Sample length check pass: True" in lines
