"""No silent wrong results: what the transformers predictor would drop, cast or load with a random head, and a text
metric over token ids, are refused by ``run`` and ``manifest validate`` alike (exit 2, one paragraph naming the
input, field or metric, no traceback); "official" is recorded only for an MLPerf benchmark's own metric.

Checkpoints are built here from tiny configs (a random Llama with a local word-level tokenizer; config-only
folders for the kinds the predictor does not take, which also shows that no weights are read to refuse them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mlharness.paths import MANIFESTS_DIR

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB, PROMPT_LEN, NEW_TOKENS, COUNT = 64, 6, 3, 4
TIMEOUT = 180

TEXT_INPUT = {"name": "input_ids", "type": "text", "element_type": "int64", "shape": [-1]}
IMAGE_INPUT = {"name": "pixel_values", "type": "image", "element_type": "float32", "shape": [3, 8, 8]}
PROMPTS = ("import numpy as np\n\n\ndef preprocess(ctx, index):\n"
           f"    return np.random.default_rng(index).integers(3, {VOCAB}, size={PROMPT_LEN}).astype(np.int64)\n")
WITH_IMAGE = ("import numpy as np\n\n\ndef preprocess(ctx, index):\n"
              f"    ids = np.random.default_rng(index).integers(3, {VOCAB}, size={PROMPT_LEN}).astype(np.int64)\n"
              "    return ids, np.zeros((3, 8, 8), np.float32)\n")


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    from tests.helpers.tiny_llama import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), VOCAB, hidden=16, layers=1, heads=2,
                            kv_heads=1, positions=64)


def config_only(tmp_path: Path, config) -> Path:
    """A checkpoint folder holding only config.json: enough for AutoConfig, nothing for from_pretrained."""
    folder = tmp_path / type(config).__name__
    config.save_pretrained(folder)
    return folder


def llm_manifest(tmp_path: Path, checkpoint: Path, inputs=(TEXT_INPUT,), preprocess: str = PROMPTS,
                 accuracy: dict | None = None, **extra) -> Path:
    data = {
        "name": "tiny_llm",
        "framework": {"name": "transformers", "version": "*", "warmup": 0},
        "inputs": list(inputs),
        "outputs": [{"name": "tokens", "element_type": "int32", "shape": [-1]}],
        "model": {"graph_path": str(checkpoint)},
        "response": {"kind": "tokens"},
        "generation": {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS},
        "dataset": {"name": "tiny_prompts", "init": f"def init(count):\n    return min(count or {COUNT}, {COUNT})\n"},
        "preprocess": preprocess,
        **({"accuracy": accuracy} if accuracy else {}),
        **extra,
    }
    path = tmp_path / "tiny_llm.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refused(proc, *named: str) -> str:
    """Exit 2, one error paragraph naming each of ``named``, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for name in named:
        assert name in proc.stderr, (name, proc.stderr)
    return proc.stderr


def run_accuracy(run_cli, manifest: Path | str, out: Path, *args: str):
    return run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy", "--output",
                   str(out), "--no-progress", *args, timeout=TIMEOUT)


def test_declared_input_the_predictor_drops_is_refused(run_cli, tmp_path, llama):
    manifest = llm_manifest(tmp_path, llama, inputs=(TEXT_INPUT, IMAGE_INPUT), preprocess=WITH_IMAGE)
    validate = run_cli("manifest", "validate", str(manifest), timeout=TIMEOUT)
    refused(validate, "pixel_values", str(manifest), "'inputs'", "causal language models")
    out = tmp_path / "run"
    refused(run_accuracy(run_cli, manifest, out), "pixel_values", str(manifest), "causal language models")
    assert not out.exists()

    image_only = llm_manifest(tmp_path, llama, inputs=(IMAGE_INPUT,))  # pixels would be cast to token ids
    refused(run_cli("manifest", "validate", str(image_only), timeout=TIMEOUT), "pixel_values", "float32",
            "inputs[0].element_type")


@pytest.mark.parametrize("kind", ["ctc", "llava", "classifier"])
def test_checkpoint_of_another_kind_is_refused_in_one_paragraph(run_cli, tmp_path, kind):
    from transformers import (
        LlamaConfig,
        LlavaConfig,
        Wav2Vec2Config,
    )

    tiny = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    if kind == "ctc":
        config = Wav2Vec2Config(**tiny, architectures=["Wav2Vec2ForCTC"])
        said = ("Wav2Vec2Config", "CTC speech", "Use framework")
    elif kind == "llava":
        config = LlavaConfig(architectures=["LlavaForConditionalGeneration"])
        said = ("LlavaConfig", "image+text", "type: chat")
    else:  # a type AutoModelForCausalLM takes, saved from a classifier: it would load with a random head
        config = LlamaConfig(**tiny, architectures=["LlamaForSequenceClassification"])
        said = ("LlamaForSequenceClassification", "sequence classifier", "untrained language-model head",
                "Use framework")
    checkpoint = config_only(tmp_path, config)
    manifest = llm_manifest(tmp_path, checkpoint)
    procs = [run_cli("manifest", "validate", str(manifest), timeout=TIMEOUT)]
    if kind == "ctc":  # run refuses with the same paragraph (one kind: each run imports torch and transformers)
        procs.append(run_accuracy(run_cli, manifest, tmp_path / "run"))
    for proc in procs:
        err = refused(proc, str(manifest), "model.graph_path", "AutoModelForCausalLM", *said)
        assert len(err) < 1200 and "ForCausalLM," not in err  # a paragraph, not transformers' list of classes


def test_text_metric_refuses_token_ids_without_a_tokenizer(run_cli, tmp_path, llama):
    labels = tmp_path / "answers.txt"
    labels.write_text("".join(f"w{i}\n" for i in range(COUNT)))
    manifest = llm_manifest(tmp_path, llama, accuracy={"metric": "exact_match", "options": {"labels": str(labels)}})
    refused(run_cli("manifest", "validate", str(manifest), timeout=TIMEOUT), "exact_match", "token ids",
            "accuracy.options.tokenizer", str(llama))
    out = tmp_path / "run"
    refused(run_accuracy(run_cli, manifest, out), "exact_match", "token ids", "accuracy.options.tokenizer")
    assert not out.exists()  # refused before the model loads


def test_text_metric_decodes_token_ids_with_the_named_tokenizer_and_is_not_official(run_cli, tmp_path, llama):
    from transformers import AutoTokenizer

    labels = tmp_path / "answers.txt"
    labels.write_text("".join(f"w{i}\n" for i in range(COUNT)))
    accuracy = {"metric": "exact_match", "options": {"labels": str(labels), "tokenizer": str(llama)}}
    out = tmp_path / "run"
    proc = run_accuracy(run_cli, llm_manifest(tmp_path, llama, accuracy=accuracy), out)
    assert proc.returncode == 0, proc.stderr
    assert f"decoded with the tokenizer in {llama}" in proc.stderr
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["accuracy"]["name"] == "exact_match" and meta["accuracy"]["official"] is False
    # the figure is that of the decoded texts, computed here from the log with the same tokenizer
    tok = AutoTokenizer.from_pretrained(llama)
    entries = {e["qsl_idx"]: e for e in json.loads((out / "mlperf_log_accuracy.json").read_text())}
    texts = {i: tok.decode(list(bytes.fromhex(e["data"])[::4]), skip_special_tokens=True) for i, e in entries.items()}
    good = sum(texts[i].strip() == f"w{i}" for i in range(COUNT))
    assert json.loads((out / "accuracy.txt").read_text())["exact_match"] == pytest.approx(100.0 * good / COUNT)


def test_text_metric_refuses_a_token_log_scored_outside_a_run(tmp_path):
    from mlharness.errors import AccuracyError
    from mlharness.tasks import METRICS
    from mlharness.tasks.base import AccuracyContext

    (tmp_path / "labels.txt").write_text("w3\n")
    log = tmp_path / "log.json"
    log.write_text(json.dumps([{"seq_id": 0, "qsl_idx": 0, "data": "03000000", "token_count": 1}]))
    with pytest.raises(AccuracyError, match="token ids .*token_count.*'tokenizer'"):
        METRICS.get("token_f1")().score(log, AccuracyContext(dataset_path=tmp_path, count=1, options={}))


def demo_manifest(tmp_path: Path, accuracy: dict | None = None, **extra) -> Path:
    data = yaml.safe_load((MANIFESTS_DIR / "demo" / "demo.yaml").read_text())
    data.update(extra)
    if accuracy:
        data["accuracy"] = accuracy
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(("what", "official"), [
    ("demo", False),  # imagenet_top1, but the demo names no MLPerf benchmark
    ("resnet50", True),  # the same model named as resnet50: its official metric
    ("resnet50-generic-top1", False),  # resnet50 scored by a generic metric
])
def test_official_only_for_the_benchmark_metric(run_cli, tmp_path, what, official):
    resnet = {"mlperf": {"model": "resnet50", "benchmark": "resnet"}}
    if what == "demo":
        manifest = demo_manifest(tmp_path)
    elif what == "resnet50":
        manifest = demo_manifest(tmp_path, **resnet)
    else:
        manifest = demo_manifest(tmp_path, accuracy={"metric": "top1", "options": {"labels": "val_map.txt"}},
                                 **resnet)
    out = tmp_path / "run"
    proc = run_accuracy(run_cli, manifest, out)
    assert proc.returncode == 0, proc.stderr
    acc = json.loads((out / "mlharness_run.json").read_text())["accuracy"]
    assert acc["value"] == 100.0 and acc["official"] is official, acc


def test_validate_names_the_class_of_a_causal_lm_under_home_as_run_finds_it(run_cli, cli_env, tmp_path, llama):
    home = tmp_path / "home"
    home.mkdir()
    (home / "tiny").symlink_to(llama, target_is_directory=True)
    manifest = llm_manifest(tmp_path, Path("~/tiny"))
    proc = run_cli("manifest", "validate", str(manifest), env={**cli_env, "HOME": str(home)}, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert f"checkpoint {home / 'tiny'} resolves to LlamaForCausalLM" in proc.stdout
