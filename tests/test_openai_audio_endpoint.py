"""``mlharness run --endpoint URL`` with a manifest whose input is audio (whisper) sends each clip to the server's
/v1/audio/transcriptions (framework ``openai-audio``), not to /v1/completions: with the manifest's own
``openai-audio`` variant options (the served model's name, the language), or, without one, the options of its
framework that ``openai-audio`` knows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.test_whisper_models import ROOT, endpoint, synthetic_set  # noqa: F401 - fixtures of this module too

WHISPER = ROOT / "mlharness/manifests/whisper/whisper.yaml"


def whisper_manifest(folder: Path, variant: bool) -> Path:
    """The whisper manifest as shipped (transformers-speech), on the synthetic set; its model is a file, not a
    checkpoint folder (the server has the model; no local tokenizer either)."""
    m = yaml.safe_load(WHISPER.read_text())
    placeholder = folder / "served-elsewhere.txt"
    placeholder.write_text("the server at --endpoint serves this model\n")
    m["model"] = {"graph_path": str(placeholder)}
    if not variant:
        m.pop("frameworks")
    m.update(attributes={"synthetic_librispeech": True},
             dataset=str(ROOT / "mlharness/manifests/whisper/datasets/librispeech.yaml"))
    path = folder / "whisper-local.yaml"
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    return path


def test_an_audio_manifest_run_with_endpoint_goes_to_the_transcription_endpoint(run_cli, tmp_path, endpoint):  # noqa: F811
    manifest = whisper_manifest(tmp_path, variant=True)
    out = tmp_path / "out"
    proc = run_cli("run", "--manifest", str(manifest), "--endpoint", endpoint["url"], "--scenario", "Offline",
                   "--mode", "accuracy", "--count", "4", "--no-progress", "--output", str(out), timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "accuracy.txt").read_text().startswith("Word Error Rate: 0.0%, accuracy=100.0%\n")
    # every clip (and the warmup's) reached /v1/audio/transcriptions (the server answers 404 elsewhere), with the
    # fields of the variant
    assert len(endpoint["fields"]) >= 4
    assert {(f["model"], f["language"]) for f in endpoint["fields"]} == {("openai/whisper-large-v3", "en")}
    assert "openai-audio" in json.dumps(json.loads((out / "mlharness_run.json").read_text()))


@pytest.mark.parametrize("variant", [True, False])
def test_the_transcription_framework_takes_the_variant_or_the_options_it_knows(tmp_path, variant):
    from mlharness.manifest.loader import load_manifest
    from mlharness.predictors.openai import endpoint_manifest

    loaded = load_manifest(whisper_manifest(tmp_path, variant))
    fw = endpoint_manifest(loaded, ["http://127.0.0.1:9"]).model.framework
    assert fw.name == "openai-audio"
    want = {"endpoints": ["http://127.0.0.1:9"], "response": "mlharness.tasks.librispeech.dataset:text_to_labels"}
    if variant:
        want.update(model="openai/whisper-large-v3", language="en")
    assert fw.options == want  # transformers-speech's dtype is not carried over
