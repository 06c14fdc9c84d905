"""whisper: audio inputs, the LibriSpeech layout (synthetic set), WER as speech2text/accuracy_eval.py computes it
(byte-identical to the official script's output on a perturbed log), and the oracle in a real Offline run."""

from __future__ import annotations

import array
import json
import re
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import AccuracyError, DatasetError

soundfile = pytest.importorskip("soundfile")
pytest.importorskip("soxr")
pytest.importorskip("whisper_normalizer")  # openai-whisper's normaliser (openai-whisper itself is optional)

FIXTURES = Path(__file__).parent / "fixtures" / "librispeech"
# the submission checker's pattern for whisper (constants.py ACC_PATTERN "ACCURACY")
CHECKER_ACCURACY = r"Word Error Rate\:.*, accuracy=([0-9\.]+)%"


def test_synthetic_set_has_the_reference_layout(tmp_path):
    from mlharness.tasks.librispeech.dataset import (
        LABELS,
        LibriSpeech,
        labels_to_text,
        parse_transcript,
        text_to_labels,
    )
    from mlharness.tasks.librispeech.synth import write_synthetic_librispeech

    out = write_synthetic_librispeech(tmp_path / "set", count=3, seed=1, use_espeak=False)
    records = json.loads((out / "dev-all-repack.json").read_text())
    assert len(records) == 3 and json.loads((out / "synth.json").read_text())["speech"] == "tones"
    for rec in records:
        assert set(rec) == {"transcript", "files", "original_duration", "original_num_samples"}
        (f,) = rec["files"]
        assert f["fname"].startswith("dev-all-repack/") and f["speed"] == 1 and f["sample_rate"] == 16000.0
        info = soundfile.info(str(out / f["fname"]))
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert info.frames == f["num_samples"] == rec["original_num_samples"]
        assert rec["original_duration"] == pytest.approx(info.frames / 16000) and rec["original_duration"] <= 30
        assert rec["transcript"] == rec["transcript"].lower().strip()
    clips = LibriSpeech(out / "dev-all-repack.json")
    assert len(clips) == 3 and clips.reference(0) == records[0]["transcript"]
    wave = clips.audio(0)
    assert wave.dtype == np.float32 and wave.size == records[0]["original_num_samples"] and np.abs(wave).max() > 0.1
    assert np.array_equal(clips.pcm16(0), soundfile.read(str(out / records[0]["files"][0]["fname"]),
                                                         dtype="int16")[0].astype(np.int32))
    # manifest.py's transcript parsing: characters outside the 42 labels dropped
    assert len(LABELS) == 42 and labels_to_text(parse_transcript("Mr. O'Neil, 25%!")) == "r 'eil 25%"
    # a model's text as the reference SUT answers it: lower case and stripped first
    assert labels_to_text(text_to_labels(" Mr. Quilter's 25%.")) == "mr quilter's 25%"


def test_clips_over_30_s_and_non_text_transcripts_are_dropped_as_the_reference_does():
    from mlharness.tasks.librispeech.dataset import LibriSpeech

    clips = LibriSpeech(FIXTURES / "dev-all-repack.json", data_dir="/data")
    raw = json.loads((FIXTURES / "dev-all-repack.json").read_text())
    assert len(raw) == 8 and len(clips) == 6
    assert clips.reference(2) == "r rown paid twenty five dollars didn't he t's 'eil's colour"
    assert clips.reference(3).startswith("any one of the forty two")
    assert clips.audio_path(0) == Path("/data/dev-all-repack/1000-2000_0.wav")
    with pytest.raises(DatasetError, match="sample 6 is outside the 6 clips"):
        clips.reference(6)


@pytest.mark.skipif(__import__("shutil").which("espeak-ng") is None,
                    reason="espeak-ng is not installed (apt-get install espeak-ng): the synthetic set uses tones")
def test_synthetic_speech_comes_from_espeak_ng_when_installed(tmp_path):
    from mlharness.tasks.librispeech.dataset import LibriSpeech
    from mlharness.tasks.librispeech.synth import write_synthetic_librispeech

    spoken = write_synthetic_librispeech(tmp_path / "speech", count=2, seed=3)
    toned = write_synthetic_librispeech(tmp_path / "tones", count=2, seed=3, use_espeak=False)
    assert json.loads((spoken / "synth.json").read_text())["speech"] == "espeak-ng"
    a, b = LibriSpeech(spoken / "dev-all-repack.json"), LibriSpeech(toned / "dev-all-repack.json")
    assert a.reference(1) == b.reference(1)  # the same transcripts, other audio
    assert a.audio(1).size != b.audio(1).size and np.abs(a.audio(1)).max() > 0.05


def test_audio_inputs_are_read_mono_and_resampled_to_the_declared_rate(tmp_path):
    from mlharness.tasks.librispeech.audio import audio_input, load_audio

    t = np.arange(44100) / 44100
    tone = 0.5 * np.sin(2 * np.pi * 440 * t)
    path = tmp_path / "stereo.flac"
    soundfile.write(str(path), np.stack([tone, np.zeros_like(tone)], axis=1), 44100)
    ctx = {"inputs": [{"name": "input_values", "type": "audio", "parameters": {"sample_rate": 16000}}]}
    wave = audio_input(ctx, path)
    assert wave.dtype == np.float32 and wave.ndim == 1 and abs(wave.size - 16000) <= 1
    assert np.abs(wave).max() == pytest.approx(0.25, abs=0.01)  # the two channels averaged
    spectrum = np.abs(np.fft.rfft(wave))
    assert abs(np.argmax(spectrum) * 16000 / wave.size - 440) < 2  # the same pitch after resampling
    assert load_audio(path).size == 44100
    with pytest.raises(DatasetError, match="input 'x' \\(type: audio\\) needs parameters.sample_rate"):
        audio_input({"inputs": [{"name": "x", "type": "audio", "parameters": {}}]}, path)
    with pytest.raises(DatasetError, match="declares no input of type: audio"):
        audio_input({"inputs": [{"name": "x", "type": "image"}]}, path)
    (tmp_path / "bad.wav").write_text("not audio")
    with pytest.raises(DatasetError, match="cannot read audio file .*bad.wav"):
        load_audio(tmp_path / "bad.wav")


def _official_line() -> str:
    return (FIXTURES / "official_output.txt").read_text().splitlines()[-1] + "\n"


def test_wer_is_byte_identical_to_the_official_script_on_a_perturbed_log(run_cli):
    """official_output.txt: accuracy_eval.py --output_dtype int64 on mlperf_log_accuracy.json (words dropped,
    substituted, run together, digits and symbols for words, a repeated sample, a clip over 30 s and a transcript
    that is no string in the manifest)."""
    proc = run_cli("accuracy", "librispeech", "--log", str(FIXTURES / "mlperf_log_accuracy.json"), "--manifest",
                   str(FIXTURES / "dev-all-repack.json"), "--dtype", "int64")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == _official_line() == "Word Error Rate: 20.238095238095237%, accuracy=79.76190476190477%\n"


def test_int32_responses_score_the_same(tmp_path):
    from mlharness.tasks.librispeech.metric import score_log

    entries = json.loads((FIXTURES / "mlperf_log_accuracy.json").read_text())
    for e in entries:
        e["data"] = np.frombuffer(bytes.fromhex(e["data"]), "<i8").astype("<i4").tobytes().hex().upper()
    (tmp_path / "log.json").write_text(json.dumps(entries))
    result = score_log(tmp_path / "log.json", FIXTURES / "dev-all-repack.json", "int32")
    assert result.text == _official_line()
    assert result.value == pytest.approx(79.76190476190477) and result.details["words"] == 84
    assert float(re.match(CHECKER_ACCURACY, result.text).group(1)) == result.value


def test_the_metric_reads_the_manifest_s_response_type_without_a_dtype_option(tmp_path):
    """In a run, a manifest that declares int64 responses and no ``dtype`` option is scored as int64 (read as
    int32, every other label would be a 0: a WER near 400 %)."""
    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.librispeech.metric import WhisperWerMetric

    (tmp_path / "dev-all-repack.json").write_bytes((FIXTURES / "dev-all-repack.json").read_bytes())
    log = FIXTURES / "mlperf_log_accuracy.json"
    declared = AccuracyContext(dataset_path=tmp_path, count=0, options={}, response_dtype="int64")
    assert WhisperWerMetric().score(log, declared).text == _official_line()
    undeclared = AccuracyContext(dataset_path=tmp_path, count=0, options={})  # int32, as before
    assert WhisperWerMetric().score(log, undeclared).text != _official_line()


def test_accuracy_command_without_dtype_reads_a_whisper_int64_log_as_the_official_script(run_cli):
    """No --dtype, no run record: the int64 label indices are told from the log (read as int32 they would be
    every label followed by a space, a WER near 400 %)."""
    fixtures = FIXTURES.parent / "whisper_int64"
    official = (fixtures / "official_output.txt").read_text().splitlines()[-1] + "\n"
    proc = run_cli("accuracy", "librispeech", "--log", str(fixtures / "mlperf_log_accuracy.json"), "--manifest",
                   str(fixtures / "dev-all-repack.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == official == "Word Error Rate: 5.88235294117647%, accuracy=94.11764705882352%\n"
    assert "read as int64: inferred from the log" in proc.stderr


def _log_as(tmp_path: Path, dtype: str, record: object = None) -> Path:
    entries = json.loads((FIXTURES / "mlperf_log_accuracy.json").read_text())
    for e in entries:
        e["data"] = np.frombuffer(bytes.fromhex(e["data"]), "<i8").astype(dtype).tobytes().hex().upper()
    folder = tmp_path / dtype
    folder.mkdir(exist_ok=True)
    (folder / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    if record is not None:
        (folder / "mlharness_run.json").write_text(json.dumps(record))
    return folder / "mlperf_log_accuracy.json"


def test_label_width_comes_from_the_run_record_else_the_log(tmp_path, run_cli):
    from mlharness.tasks.librispeech.dtype import resolve_dtype

    assert resolve_dtype(_log_as(tmp_path, "<i4"), None)[0] == "int32"
    assert resolve_dtype(_log_as(tmp_path, "<i8"), None)[0] == "int64"
    assert resolve_dtype(_log_as(tmp_path, "<i8"), "int32") == ("int32", "given by --dtype")
    # the recorded fact wins over the guess (here a wrong record: the int64 log read as int32)
    dtype, source = resolve_dtype(_log_as(tmp_path, "<i8", {"response_element_type": "int32"}), None)
    assert dtype == "int32" and "mlharness_run.json" in source
    with pytest.raises(AccuracyError, match=r"mlharness_run.json: field 'response_element_type' is 'float32'"):
        resolve_dtype(_log_as(tmp_path, "<i8", {"response_element_type": "float32"}), None)
    with pytest.raises(AccuracyError, match="run record .*mlharness_run.json is not JSON"):
        (tmp_path / "<i8" / "mlharness_run.json").write_text("{")
        resolve_dtype(tmp_path / "<i8" / "mlperf_log_accuracy.json", None)

    # a few labels cannot tell int64 from int32 whose every other label is a space: refused, --dtype named
    (tmp_path / "tiny.json").write_text(json.dumps([{"qsl_idx": 0, "data": array.array("q", [8, 9]).tobytes().hex()}]))
    proc = run_cli("accuracy", "librispeech", "--log", str(tmp_path / "tiny.json"), "--manifest",
                   str(FIXTURES / "dev-all-repack.json"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert re.search(r"tiny.json: cannot tell the width .* pass --dtype", proc.stderr), proc.stderr
    (tmp_path / "odd.json").write_text(json.dumps([{"qsl_idx": 0, "data": "7F"}]))
    with pytest.raises(AccuracyError, match="no width of int8, int16, int32, int64 reads every response"):
        resolve_dtype(tmp_path / "odd.json", None)


def test_bad_responses_are_named(tmp_path):
    from mlharness.tasks.librispeech.metric import score_log

    manifest = FIXTURES / "dev-all-repack.json"
    bad = [{"seq_id": 0, "qsl_idx": 0, "data": array.array("q", [1, 42]).tobytes().hex()}]
    (tmp_path / "a.json").write_text(json.dumps(bad))
    with pytest.raises(AccuracyError, match="entry 0 .*label index 42 is outside the 42 labels"):
        score_log(tmp_path / "a.json", manifest, "int64")
    (tmp_path / "b.json").write_text(json.dumps([{"qsl_idx": 6, "data": "00000000"}]))
    with pytest.raises(AccuracyError, match="qsl_idx 6\\) is outside the 6 clips"):
        score_log(tmp_path / "b.json", manifest, "int32")
    (tmp_path / "c.json").write_text(json.dumps([{"qsl_idx": 0, "data": "000000"}]))
    with pytest.raises(AccuracyError, match="3 bytes are not whole int32 label indices"):
        score_log(tmp_path / "c.json", manifest, "int32")


def test_concatenated_words_count_as_matches():
    from mlharness.tasks.librispeech.metric import concatenation_errors

    assert concatenation_errors("the notebook entry".split(), "the note book entry".split()) == (0, 4)
    assert concatenation_errors("any one said".split(), "anyone said".split()) == (0, 2)
    assert concatenation_errors("a b".split(), "a c d".split()) == (2, 3)


def test_manifests_file_results_as_the_whisper_benchmark():
    from mlharness.manifest.loader import load_manifest

    m = load_manifest("whisper-oracle").model
    assert (m.mlperf.model, m.mlperf.benchmark, m.name) == ("whisper", "whisper", "whisper-oracle")
    assert m.response.kind == "tokens" and m.accuracy.metric == "whisper_wer"
    assert m.inputs[0].type == "audio" and m.inputs[0].parameters["sample_rate"] == 16000


def test_oracle_scores_100_in_an_offline_run_with_token_latencies(run_cli, tmp_path):
    out = tmp_path / "run"
    proc = run_cli("run", "--manifest", "whisper-oracle", "--scenario", "Offline", "--mode", "accuracy",
                   "--count", "4", "--output", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (out / "accuracy.txt").read_text()
    assert text.startswith("Word Error Rate: 0.0%, accuracy=100.0%\n")
    assert float(re.match(CHECKER_ACCURACY, text).group(1)) == 100.0
    detail = (out / "mlperf_log_detail.txt").read_text()
    assert re.search(r'"key": "requested_use_token_latencies", "value": true', detail)
    log = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in log) == [0, 1, 2, 3]


def test_synth_command_writes_a_set_the_oracle_table_covers(run_cli, tmp_path):
    from mlharness.tasks.cnndm.models import prompt_key
    from mlharness.tasks.librispeech.dataset import LibriSpeech
    from mlharness.tasks.librispeech.models import END_LABEL, oracle_table

    out = tmp_path / "set"
    proc = run_cli("dataset", "synth", "librispeech", "--out", str(out), "--count", "2", "--tones")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "wrote 2 clips" in proc.stdout and '"speech": "tones"' in proc.stdout
    again = run_cli("dataset", "synth", "librispeech", "--out", str(out), "--count", "2")
    assert again.returncode != 0 and str(out) in again.stderr + again.stdout  # never writes over a folder
    table = oracle_table(out / "dev-all-repack.json")
    clips = LibriSpeech(out / "dev-all-repack.json")
    assert table["eos_token_id"] == END_LABEL == 0  # a trailing space, which normalisation drops
    assert [table["entries"][prompt_key(clips.pcm16(i))] for i in range(2)] == [clips.labels(0), clips.labels(1)]


def test_the_whisper_normalizer_fallback_gives_the_official_line(monkeypatch):
    """Without openai-whisper the metric uses whisper-normalizer's copy of the normaliser: the same output."""
    pytest.importorskip("whisper_normalizer")
    import sys

    from mlharness.tasks.librispeech import metric

    monkeypatch.setitem(sys.modules, "whisper.normalizers", None)  # import fails as if openai-whisper were absent
    assert type(metric.normalizer()).__module__.startswith("whisper_normalizer")
    result = metric.score_log(FIXTURES / "mlperf_log_accuracy.json", FIXTURES / "dev-all-repack.json", "int64")
    assert result.text == _official_line()
