"""LibriSpeech dev-clean + dev-other for the whisper benchmark: the reference's repacked clips and manifest, the
synthetic set, audio inputs for any manifest (:mod:`.audio`), the oracle table, and WER as the official
``accuracy_eval.py`` computes it."""

METRICS = {"whisper_wer": "mlharness.tasks.librispeech.metric:WhisperWerMetric"}
