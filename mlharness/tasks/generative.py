"""What the token-stream (generative) task packages share: cnndm (llama3.1-8b), openorca (llama2-70b), deepseek_r1
and gpt_oss.

- Data: :func:`hook_dataset`, :func:`dataset_root` and :func:`chosen_file` (what a dataset manifest's hook reads:
  the given folder or the synthetic set in the cache), :func:`find_data_file` (the data file under
  ``--dataset-path``), :func:`local_tokenizer` (a checkpoint folder's tokenizer, never downloaded) and
  :class:`PromptSet` (prompts as 1-D int32 arrays, what ``preprocess`` returns).
- Accuracy: :func:`first_responses` (the token ids of the first log entry of each sample, as the official LLM
  scripts read ``mlperf_log_accuracy.json``), :func:`decode_responses`, :func:`resolve` and :func:`data_and_base`
  (where a metric's files are, from the run's dataset path and its options), :func:`guarded` (file errors as
  accuracy errors).
- Test models: :func:`prompt_key` (the key of a token-oracle table), :func:`table_of` (such a table),
  :func:`ensure_table` (a table rebuilt when its source files change), :func:`build_random_lm`,
  :func:`ensure_checkpoint` and :func:`save_checkpoint` (a tiny random-weight checkpoint folder, built once),
  :func:`synthetic_cache`, :func:`ensure_synthetic` (a synthetic set written unless a complete one is there),
  :func:`write_synthetic`, :func:`replace_file` and :func:`place_tokenizer` (how one is written).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import AccuracyError, DatasetError, MLHarnessError
from mlharness.fileguard import DATA_FILE_LIMIT, check_regular_file, open_regular, read_json
from mlharness.tasks.base import AccuracyContext, accuracy_log_entries

log = logging.getLogger(__name__)

DTYPES = {"int32": np.int32, "int64": np.int64}
TABLE_FORMAT = 1
CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json")


# ---- data ----------------------------------------------------------------------------------------------------

def find_data_file(root: Path | str, name: str, missing: str) -> Path:
    """``root`` itself when it is a file, else ``root/name``; ``missing`` is the error when neither exists
    (formatted with the ``path`` looked for and the file's ``name``)."""
    root = Path(root).expanduser()
    path = root if root.is_file() else root / name
    if not path.is_file():
        raise DatasetError(missing.format(path=path, name=name))
    return path


def local_tokenizer(path: Path | str, where: str, **options: Any) -> Any:
    """``AutoTokenizer.from_pretrained`` of a local folder with ``options``, no download. ``where`` ends the
    error when the folder is missing (what folder to give)."""
    from transformers import AutoTokenizer

    path = Path(path).expanduser()
    if not path.is_dir():
        raise DatasetError(f"tokenizer folder {path} not found ({where})")
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True, **options)
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot load the tokenizer in {path}: {e}") from e


def dataset_root(ctx: dict[str, Any], synthetic_flag: str, ensure: Callable[[], Path], missing: str) -> Any:
    """For a dataset manifest's hook: ``ctx["dataset_path"]``, else, for manifests whose attribute
    ``synthetic_flag`` is set, the synthetic set ``ensure()`` makes in the cache; ``missing`` is the error
    otherwise."""
    root = ctx.get("dataset_path")
    if root:
        return root
    if not (ctx.get("attributes") or {}).get(synthetic_flag):
        raise DatasetError(missing)
    return ensure()


def chosen_file(ctx: dict[str, Any], default: str) -> str:
    """The data file a dataset manifest's hook reads: ``attributes.dataset_file``, else
    ``dataset_attributes.file``, else ``default``."""
    attrs = ctx.get("dataset_attributes") or {}
    return str((ctx.get("attributes") or {}).get("dataset_file") or attrs.get("file") or default)


def hook_dataset(ctx: dict[str, Any], default_file: str, synthetic_flag: str, ensure: Callable[[], Path],
                 missing: str, find: Callable[[Any, str], Path], load: Callable[[Path], Any]) -> Any:
    """A dataset manifest's ``init``: ``load`` the file :func:`chosen_file` names, found by ``find(root, name)``
    under :func:`dataset_root` (``missing`` is formatted with the file's ``name``). Sets ``ctx["dataset_path"]``
    (the file's folder) for the accuracy metric."""
    name = chosen_file(ctx, default_file)
    path = find(dataset_root(ctx, synthetic_flag, ensure, missing.format(name=name)), name)
    data = load(path)
    ctx["dataset_path"] = str(path.parent)
    return data


class PromptSet:
    """Prompts in memory as 1-D int32 arrays; a task's data class fills :attr:`prompts`."""

    prompts: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.prompts)

    def prompt(self, index: int) -> np.ndarray:
        """The prompt token ids of sample ``index``, 1-D int32."""
        return self.prompts[index]


# ---- accuracy ------------------------------------------------------------------------------------------------

def resolve(path: str, base: Path | None) -> Path:
    """``path`` (``~`` expanded) relative to ``base`` unless it is absolute or there is no base."""
    p = Path(path).expanduser()
    return p if p.is_absolute() or base is None else base / p


def guarded(who: str, score: Callable[[], Any]) -> Any:
    """``score()``, a file or value error in it reported as an :class:`AccuracyError` of metric ``who``."""
    try:
        return score()
    except MLHarnessError:
        raise
    except (OSError, ValueError) as e:
        raise AccuracyError(f"{who}: {e}") from e


def data_and_base(ctx: AccuracyContext, default_file: str) -> tuple[Path, Path | None]:
    """(the data file a metric scores against, the folder its other options are relative to): the run's dataset
    path when it is a file, else the option ``dataset_file`` (``default_file``) under it."""
    base = Path(ctx.dataset_path) if ctx.dataset_path is not None else None
    if base is not None and base.is_file():
        return base, base.parent
    return resolve(str(ctx.options.get("dataset_file", default_file)), base), base


def first_responses(accuracy_log: Path, count: int, who: str, source: Path | str, dtype: str = "int32",
                    outside: str = "error") -> tuple[list[list[int]], list[int], int]:
    """(token ids, qsl_idx) of the first entry of each sample of an accuracy log, in log order, and the number of
    entries left out as repeats of a sample. An entry past the ``count`` samples of ``source`` is an error, or
    with ``outside="skip"`` left out (logged). ``who`` starts the errors."""
    if dtype not in DTYPES:
        raise AccuracyError(f"{who}: unsupported dtype '{dtype}'; expected int32 or int64")
    seen: set[int] = set()
    ids: list[list[int]] = []
    rows: list[int] = []
    entries = accuracy_log_entries(accuracy_log)
    for entry in entries:
        if entry.qsl_idx in seen:
            continue  # the first response of a sample counts
        if not 0 <= entry.qsl_idx < count:
            if outside != "skip":
                raise AccuracyError(f"{who}: {accuracy_log}: {entry.where} is outside the {count} samples of "
                                    f"{source}")
            seen.add(entry.qsl_idx)
            log.warning("%s: %s is outside the %d samples; skipped as the official script does", accuracy_log,
                        entry.where, count)
            continue
        seen.add(entry.qsl_idx)
        data = entry.data(accuracy_log)
        if len(data) % np.dtype(DTYPES[dtype]).itemsize:
            raise AccuracyError(f"{who}: {accuracy_log}: {entry.where}: {len(data)} bytes are not whole {dtype} "
                                f"token ids")
        ids.append(np.frombuffer(data, DTYPES[dtype]).tolist())
        rows.append(entry.qsl_idx)
    if not ids:
        raise AccuracyError(f"{who}: accuracy log {accuracy_log} has no entries; nothing to score")
    return ids, rows, len(entries) - len(seen)


def decode_responses(tokenizer: Any, ids: list[list[int]], who: str, accuracy_log: Path,
                     tokenizer_dir: Path | str) -> list[str]:
    """The texts of the responses, special tokens skipped (``batch_decode``), as the official scripts decode."""
    try:
        return tokenizer.batch_decode(ids, skip_special_tokens=True)
    except (OverflowError, TypeError, ValueError, IndexError) as e:
        raise AccuracyError(f"{who}: cannot decode the token ids of {accuracy_log} with the tokenizer in "
                            f"{tokenizer_dir}: {e}") from e


# ---- test models ---------------------------------------------------------------------------------------------

def prompt_key(ids: Any) -> str:
    """The token-oracle table key of a prompt: sha256 of its token ids as little-endian int32."""
    return hashlib.sha256(np.asarray(ids, dtype="<i4").tobytes()).hexdigest()


def table_of(entries: dict[str, list[int]], eos_token_id: int, dataset: Path | str) -> dict[str, Any]:
    """A token-oracle table: prompt key -> the answer's token ids (the oracle appends ``eos_token_id``)."""
    return {"format": TABLE_FORMAT, "eos_token_id": eos_token_id, "dataset": str(dataset), "entries": entries}


def source_digest(paths: list[Path]) -> str:
    """sha256 over files and every file of folders (names relative to the folder, and bytes)."""
    digest = hashlib.sha256()
    for p in paths:
        files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
        for f in files:
            digest.update(str(f.relative_to(p) if p.is_dir() else f.name).encode() + b"\0")
            # streamed (a source may be a dataset of GiBs), up to the size the file had when it was opened
            with open_regular(f, "oracle table source", error=DatasetError) as fh:
                left = os.fstat(fh.fileno()).st_size
                while left > 0 and (chunk := fh.read(min(1 << 20, left))):
                    digest.update(chunk)
                    left -= len(chunk)
    return digest.hexdigest()


def ensure_table(path: Path | str, sources: list[Path], build: Callable[[], dict[str, Any]]) -> Path:
    """The JSON table at ``path``, written by ``build`` unless it was made from these very ``sources`` (it
    records their :func:`source_digest`)."""
    path = Path(path)
    source = source_digest(sources)
    if os.path.lexists(path):  # a FIFO or folder there is not a table mlharness wrote: never replaced
        check_regular_file(path, "oracle table", error=DatasetError)
    try:  # made from these very files: reused without building (seconds per run)
        # a table holds one answer's token ids per prompt: a few MiB for the largest sets
        if read_json(path, "oracle table", DATA_FILE_LIMIT).get("source_sha256") == source:
            return path
    except (MLHarnessError, AttributeError):
        pass
    data = json.dumps({**build(), "source_sha256": source}, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
        f.write(data)
    Path(f.name).replace(path)
    return path


def save_checkpoint(model: Any, tokenizer: Any, out: Path, doc: str) -> Path:
    """Save a model and its tokenizer as a checkpoint folder marked with ``doc`` (what built it)."""
    from transformers.utils import logging as hf_logging

    out.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar in a run's output
    try:
        model.save_pretrained(str(out), safe_serialization=True)
    finally:
        hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(str(out))
    (out / "mlharness.json").write_text(json.dumps({"doc": doc}))
    return out


def build_random_lm(out: Path | str, doc: str, config_class: Any, model_class: Any, tokenizer: Any, eos: Any,
                    config: dict[str, Any], bos: bool = True) -> Path:
    """Write a tiny random-weight causal LM (seeded: the same weights every time) with ``tokenizer`` into the
    folder ``out``: ``config_class`` made from ``config`` and the tokenizer's ids (EOS ``eos``; no BOS unless
    ``bos``), greedy generation."""
    import torch
    from transformers import GenerationConfig

    ids: dict[str, Any] = {"eos_token_id": eos, "pad_token_id": tokenizer.pad_token_id}
    if bos:
        ids["bos_token_id"] = tokenizer.bos_token_id
    model_config = config_class(vocab_size=len(tokenizer), **ids, **({} if bos else {"bos_token_id": None}),
                                **config)
    torch.manual_seed(0)
    model = model_class(model_config).eval()
    model.generation_config = GenerationConfig(**ids, do_sample=False)
    return save_checkpoint(model, tokenizer, Path(out), doc)


def ensure_checkpoint(path: Path | str, doc: str, build: Callable[[Path], Any], what: str) -> Path:
    """The checkpoint folder at ``path``, built by ``build(folder)`` (into a fresh folder, then moved there)
    unless one marked with ``doc`` is complete there."""
    path = Path(path)
    try:  # mlharness.json is the one-line mark save_checkpoint writes
        if read_json(path / "mlharness.json", "checkpoint mark", 1 << 20).get("doc") == doc and all(
                (path / name).is_file() for name in CHECKPOINT_FILES):
            return path
    except (MLHarnessError, AttributeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        build(tmp)
        shutil.rmtree(path, ignore_errors=True)
        tmp.replace(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("wrote %s to %s", what, path)
    return path


def synthetic_cache(name: str) -> Path:
    """Where the oracle and random manifests keep a synthetic set when no --dataset-path is given."""
    from mlharness.manifest.assets import cache_dir

    return cache_dir() / name


def write_synthetic(out: Path | str, count: int, label: str, marker: str, write: Callable[[Path], Any]) -> Path:
    """Write a synthetic set of ``count`` samples into ``out`` with ``write(out)``: first the file ``marker``
    (whose presence marks the set complete, so ``write`` writes it last) and ``tokenizer/`` are removed; a
    failure to write is a :class:`DatasetError` naming the set (``label``)."""
    out = Path(out)
    if count < 1:
        raise DatasetError(f"synthetic {label}: count must be >= 1, got {count}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / marker).unlink(missing_ok=True)
        shutil.rmtree(out / "tokenizer", ignore_errors=True)
        write(out)
    except OSError as e:
        raise DatasetError(f"synthetic {label}: cannot write {out}: {e}") from e
    log.info("wrote %d synthetic %s samples to %s", count, label, out)
    return out


def replace_file(path: Path, write: Callable[[Path], Any]) -> None:
    """``write(tmp)`` a temporary file beside ``path``, then move it into place (readers never see half a file)."""
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
        tmp = Path(f.name)
    write(tmp)
    tmp.replace(path)


def place_tokenizer(folder: Path, source: Path | str | None, save_default: Callable[[Path], Any],
                    load: Callable[[Any], Any]) -> None:
    """Save a tokenizer into ``folder``: ``save_default(folder)`` without a ``source``, else the one ``load``
    reads from the checkpoint folder ``source``."""
    if source is None:
        save_default(folder)
    else:
        load(source).save_pretrained(str(folder))


def ensure_synthetic(out: Path | str, complete: Callable[[Path], bool], write: Callable[[Path], Path]) -> Path:
    """The synthetic set in ``out``: written by ``write(out)`` unless ``complete(out)`` says it is there (a
    failure to read it counts as not there)."""
    out = Path(out)
    try:
        if (out / "tokenizer" / "tokenizer.json").is_file() and complete(out):
            return out
    except (OSError, ValueError, DatasetError):
        pass
    return write(out)
