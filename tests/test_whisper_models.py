"""whisper models that transcribe: the tiny random Whisper (transformers-speech: clip samples in, log-mel features,
streamed greedy decoding, the transcript answered as int64 label indices), the `whisper` manifest on a local
checkpoint folder, the /v1/audio/transcriptions endpoint predictor against a fake server on 127.0.0.1, the int64
responses the official speech2text/accuracy_eval.py reads unmodified (its output kept as a fixture), and the
overhead bench's quick mode."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import threading
import wave
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("soundfile")
pytest.importorskip("soxr")
pytest.importorskip("whisper_normalizer")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "whisper_int64"
CHECKER_ACCURACY = r"Word Error Rate\:.*, accuracy=([0-9\.]+)%"
DEV = ["--min-duration-ms", "100", "--no-progress", "--no-calibrate"]
# what the fake server answers for the clips whose reference it perturbs (by qsl_idx): words dropped, substituted,
# run together, Whisper's capitals and punctuation (which the reference SUT lowers and drops)
PERTURB = {0: lambda t: " ".join(t.split()[:-1]), 1: lambda t: "banana " + " ".join(t.split()[1:]),
           2: lambda t: t.replace(" ", "", 1), 3: lambda t: " " + t.capitalize() + "."}


@pytest.fixture
def synthetic_set(cli_env, monkeypatch) -> Path:
    """The synthetic set the runs of this module use (the session's cache)."""
    from mlharness.tasks.librispeech.synth import ensure_synthetic_librispeech, synthetic_dir

    monkeypatch.setenv("MLHARNESS_CACHE", cli_env["MLHARNESS_CACHE"])
    return ensure_synthetic_librispeech(synthetic_dir())


def transcripts_by_audio(manifest: Path) -> dict[str, tuple[int, str]]:
    """prompt key of a clip's 16-bit samples -> (qsl_idx, reference transcript)."""
    from mlharness.tasks.cnndm.models import prompt_key
    from mlharness.tasks.librispeech.dataset import LibriSpeech

    clips = LibriSpeech(manifest)
    return {prompt_key(clips.pcm16(i)): (i, clips.reference(i)) for i in range(len(clips))}


def wav_samples(body: bytes, content_type: str) -> tuple[dict[str, str], np.ndarray]:
    """The form fields and the uploaded WAV's 16-bit samples of a multipart body."""
    boundary = re.search(r"boundary=([^;]+)", content_type).group(1).encode()
    fields, samples = {}, None
    for part in body.split(b"--" + boundary)[1:-1]:
        head, _, data = part.strip(b"\r\n").partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]+)"', head).group(1).decode()
        if name == "file":
            with wave.open(io.BytesIO(data)) as w:
                assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16000)
                samples = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.int32)
        else:
            fields[name] = data.decode()
    return fields, samples


@pytest.fixture
def endpoint(synthetic_set) -> Iterator[dict]:
    """A fake /v1/audio/transcriptions server on 127.0.0.1 answering each clip's reference transcript, perturbed
    by ``state["perturb"]`` (qsl_idx -> function) where set; ``state["fields"]`` collects the forms it got."""
    from mlharness.tasks.cnndm.models import prompt_key

    table = transcripts_by_audio(synthetic_set / "dev-all-repack.json")
    state: dict = {"perturb": {}, "fields": []}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server interface
            body = self.rfile.read(int(self.headers["Content-Length"]))
            fields, samples = wav_samples(body, self.headers["Content-Type"])
            state["fields"].append(fields)
            found = table.get(prompt_key(samples)) if self.path == "/v1/audio/transcriptions" else None
            if found is None:
                self.send_response(404)
                self.end_headers()
                self.wfile.write(b"unknown clip")
                return
            index, text = found
            text = state["perturb"].get(index, lambda t: " " + t)(text)
            data = json.dumps({"text": text}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.timeout = 5
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def endpoint_manifest(folder: Path, url: str) -> Path:
    """The whisper manifest with its openai-audio framework at ``url`` and the synthetic set (no checkpoint)."""
    import yaml

    m = yaml.safe_load((ROOT / "mlharness/manifests/whisper/whisper.yaml").read_text())
    framework = m.pop("frameworks")["openai-audio"]["framework"]
    framework["options"]["endpoints"] = [url]
    m.update(name="whisper-endpoint", framework=framework, attributes={"synthetic_librispeech": True},
             dataset=str(ROOT / "mlharness/manifests/whisper/datasets/librispeech.yaml"))
    m.pop("model")
    path = folder / "whisper-endpoint.yaml"
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    return path


def int64_log(path: Path) -> dict[int, list[int]]:
    return {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), "<i8").tolist()
            for e in json.loads(path.read_text())}


def test_random_whisper_offline_run_reports_tokens_per_second_and_scores(run_cli, tmp_path, synthetic_set):
    from mlharness.loadgen.logs import detail_values
    from mlharness.tasks.librispeech.metric import score_log

    perf = tmp_path / "perf"
    proc = run_cli("run", "--manifest", "whisper-random", "--scenario", "Offline", "--mode", "performance",
                   "--count", "4", "--min-query-count", "4", "--target-qps", "10", *DEV, "--output", str(perf),
                   timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = (perf / "mlperf_log_summary.txt").read_text()
    assert float(re.search(r"Tokens per second: ([0-9.]+)", summary).group(1)) > 0
    detail = detail_values(perf / "mlperf_log_detail.txt")
    assert detail["requested_use_token_latencies"] and not detail.get("errors")

    acc = tmp_path / "acc"
    proc = run_cli("run", "--manifest", "whisper-random", "--scenario", "Offline", "--mode", "accuracy",
                   "--count", "3", "--no-progress", "--output", str(acc), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    entries = json.loads((acc / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == [0, 1, 2]
    for e in entries:  # int64 label indices; LoadGen counted the generated whisper tokens, 2..16 of them
        labels = np.frombuffer(bytes.fromhex(e["data"]), "<i8")
        assert ((labels >= 0) & (labels < 42)).all() and 2 <= e["token_count"] <= 16
    text = (acc / "accuracy.txt").read_text()
    rescored = score_log(acc / "mlperf_log_accuracy.json", synthetic_set / "dev-all-repack.json", "int64")
    assert text.startswith(rescored.text)  # noise: WER over 100 %, accuracy negative, as the script prints it
    assert re.fullmatch(r"Word Error Rate: [0-9.]+%, accuracy=-?[0-9.]+%\n", rescored.text)


def test_random_whisper_default_performance_run_calibrates_and_passes(run_cli, tmp_path, synthetic_set):
    """The default performance command (only --min-duration-ms): calibration generates whisper's responses
    (label indices answered beside the token ids) through its timing streams before LoadGen starts. transformers'
    generation warnings (one set per generate call) are quiet unless -v."""
    proc = run_cli("run", "--manifest", "whisper-random", "--scenario", "Offline", "--mode", "performance",
                   "--min-duration-ms", "500", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    noise = [line for line in proc.stderr.splitlines()
             if re.search(r"\[transformers\]|generation_config|max_new_tokens|max_length|attention mask", line)]
    assert not noise, noise
    summaries = list(tmp_path.glob("results/**/mlperf_log_summary.txt"))
    assert len(summaries) == 1 and "Tokens per second" in summaries[0].read_text()
    meta = json.loads((summaries[0].parent / "mlharness_run.json").read_text())
    assert meta["calibration"]["calibrated"] and meta["calibration"]["extra"]["token_streams"]

    proc = run_cli("-v", "run", "--manifest", "whisper-random", "--scenario", "Offline", "--mode", "accuracy",
                   "--count", "2", "--no-progress", "--output", str(tmp_path / "verbose"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "`max_new_tokens` will take precedence" in proc.stderr


def test_whisper_manifest_runs_a_local_checkpoint_folder_with_token_latencies(run_cli, cli_env, tmp_path,
                                                                               synthetic_set, monkeypatch):
    """The real manifest on a saved random checkpoint ($MLHARNESS_WHISPER_PATH): SingleStream, where LoadGen
    measures TTFT and TPOT from the streamed first tokens."""
    from mlharness.errors import DatasetError
    from mlharness.manifest.assets import cache_dir
    from mlharness.tasks.librispeech.checkpoint import ensure_random_whisper, whisper_checkpoint

    # the random checkpoint whisper-random generates in the session's cache, copied as a checkpoint folder
    folder = shutil.copytree(ensure_random_whisper(cache_dir() / "generated" / "whisper-random" / "whisper_random"),
                             tmp_path / "whisper-large-v3")
    env = {**cli_env, "MLHARNESS_WHISPER_PATH": str(folder)}
    monkeypatch.setenv("MLHARNESS_WHISPER_PATH", str(tmp_path))
    with pytest.raises(DatasetError, match=r"checkpoint folder .* \(\$MLHARNESS_WHISPER_PATH\) lacks config.json"):
        whisper_checkpoint(tmp_path / "unused")
    monkeypatch.setenv("MLHARNESS_WHISPER_PATH", str(tmp_path / "nowhere"))
    with pytest.raises(DatasetError, match="no checkpoint folder at .*nowhere .*download whisper-large-v3"):
        whisper_checkpoint(tmp_path / "unused")
    out = tmp_path / "ss"
    proc = run_cli("run", "--manifest", "whisper", "--dataset-path", str(synthetic_set), "--scenario", "SingleStream",
                   "--mode", "performance", "--count", "2", "--min-query-count", "2", "--target-latency-ms", "500",
                   *DEV, "--output", str(out), env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for key in ("TTFT", "TPOT"):
        assert re.search(rf"{key}\s+p50 [0-9.,]+( ms)?, p90", proc.stdout), proc.stdout
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert str(folder) in json.dumps(meta)


def test_transcription_endpoint_answers_the_served_transcripts(run_cli, tmp_path, endpoint):
    manifest = endpoint_manifest(tmp_path, endpoint["url"])
    out = tmp_path / "exact"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy", "--count", "4",
                   "--no-progress", "--output", str(out), timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "accuracy.txt").read_text().startswith("Word Error Rate: 0.0%, accuracy=100.0%\n")
    assert {(f["model"], f["language"], f["temperature"]) for f in endpoint["fields"]} == {
        ("openai/whisper-large-v3", "en", "0")}

    endpoint["perturb"] = PERTURB
    out = tmp_path / "perturbed"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy", "--count", "6",
                   "--no-progress", "--output", str(out), timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int64_log(out / "mlperf_log_accuracy.json") == int64_log(FIXTURES / "mlperf_log_accuracy.json")
    assert (out / "accuracy.txt").read_text().startswith(official_line())


def official_line() -> str:
    return (FIXTURES / "official_output.txt").read_text().splitlines()[-1] + "\n"


def test_official_script_reads_the_int64_log_and_mlharness_prints_its_line():
    """official_output.txt: speech2text/accuracy_eval.py (default --output_dtype int64) on the log the endpoint
    run writes from perturbed transcripts."""
    from mlharness.tasks.librispeech.metric import score_log

    result = score_log(FIXTURES / "mlperf_log_accuracy.json", FIXTURES / "dev-all-repack.json", "int64")
    assert result.text == official_line()
    assert 0 < result.details["wer"] < 100 and result.details["samples"] == 6


def test_endpoint_errors_name_the_endpoint_and_sample(tmp_path):
    from mlharness.errors import PredictorError
    from mlharness.predictors.base import PredictorConfig
    from mlharness.predictors.generative import TokenRequest
    from mlharness.predictors.openai.audio import OpenAIAudioPredictor

    with pytest.raises(PredictorError, match="needs options.endpoints"):
        OpenAIAudioPredictor(PredictorConfig(None, ["audio"], ["labels"], options={})).load()
    p = OpenAIAudioPredictor(PredictorConfig(None, ["audio"], ["labels"], options={
        "endpoints": ["http://127.0.0.1:9"], "timeout_s": 5,
        "response": "mlharness.tasks.librispeech.dataset:text_to_labels"}))
    p.load()
    try:
        with pytest.raises(PredictorError, match=r"127.0.0.1:9/v1/audio/transcriptions \(sample 7\) failed"):
            p.transcribe(TokenRequest(7, np.zeros(160, np.float32)))
    finally:
        p.close()


def test_bench_quick_mode_reports_overhead(tmp_path, cli_env):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/bench_whisper.py"), "--quick", "--out",
                           str(tmp_path / "bench")], capture_output=True, text=True, timeout=300, env=cli_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads((tmp_path / "bench" / "bench_whisper.json").read_text())
    assert figures["offline"]["bare_samples_per_s"] > 0 and figures["offline"]["harness_samples_per_s"] > 0
    assert figures["offline"]["ratio"] > 0 and "p90_added_ms" in figures["singlestream"]
    assert "Offline throughput ratio" in proc.stdout
    shutil.rmtree(tmp_path / "bench")
