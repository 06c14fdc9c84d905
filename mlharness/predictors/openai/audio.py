"""Framework ``openai-audio``: speech-to-text by any server with OpenAI's ``/v1/audio/transcriptions`` endpoint
(``vllm serve openai/whisper-large-v3`` serves whisper this way; so do hosted APIs).

Manifest use::

    framework:
      name: openai-audio
      options: {endpoints: ["http://127.0.0.1:8000"], model: openai/whisper-large-v3, language: en,
                response: mlharness.tasks.librispeech.dataset:text_to_labels, tokenizer: /path/to/checkpoint,
                concurrency: 8, timeout_s: 600, api_key_env: OPENAI_API_KEY}

Each sample is one request: its prompt (the clip's samples at the audio input's ``parameters.sample_rate``:
floats in [-1, 1], or integer 16-bit PCM values) is uploaded as a 16-bit mono WAV file (multipart form: ``file``,
``model``, ``language``, ``temperature`` 0, ``response_format`` json) and the server answers ``{"text": ...}``.
Up to ``concurrency`` requests are in flight, spread over the endpoints in turn. The transcript comes whole, so
a sample's first token is reported with its completion (TTFT is the request's latency). What LoadGen counts as the
sample's tokens is the transcript tokenized with ``tokenizer`` (a local folder for ``transformers.AutoTokenizer``;
by default the manifest's model folder, when it has one) or, without one, the response itself (one token per
label); what the sample answers is ``response`` of the text
(``module:function``) or those tokens. A server error, a malformed answer or a request past ``timeout_s`` fails
the sample (and so the run) naming the endpoint and the sample.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import threading
import urllib.error
import urllib.request
import uuid
import wave
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.predictors.engine import OnceStream, QueuedGenerator
from mlharness.predictors.generative import TokenRequest
from mlharness.predictors.speech import finish, response_function, waveform

PATH = "/v1/audio/transcriptions"
KNOWN_OPTIONS = frozenset({"endpoints", "model", "language", "response", "tokenizer", "concurrency", "timeout_s",
                           "api_key_env", "sample_rate"})


def wav_bytes(prompt: np.ndarray, sample_rate: int) -> bytes:
    """A clip as a 16-bit mono WAV file."""
    pcm = np.clip(np.rint(waveform(prompt).astype(np.float64) * 32768.0), -32768, 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.tobytes())
    return out.getvalue()


def multipart(fields: dict[str, str], file: bytes, filename: str = "audio.wav") -> tuple[bytes, str]:
    """(body, content type) of a multipart/form-data upload of ``fields`` and one WAV ``file``."""
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                 f"Content-Type: audio/wav\r\n\r\n".encode() + file + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


class OpenAIAudioPredictor(QueuedGenerator):
    name = "openai-audio"

    def load_engine(self) -> None:
        o = self.config.options
        unknown = sorted(set(o) - KNOWN_OPTIONS)
        if unknown:
            raise PredictorError(f"framework 'openai-audio': unknown option(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(sorted(KNOWN_OPTIONS))}")
        endpoints = o.get("endpoints") or []
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        if not endpoints or not all(isinstance(e, str) and e.startswith(("http://", "https://")) for e in endpoints):
            raise PredictorError("framework 'openai-audio' needs options.endpoints: a list of http(s) URLs of "
                                 f"servers with {PATH}; got {endpoints!r}")
        self.urls = [e.rstrip("/") + PATH if not e.rstrip("/").endswith(PATH) else e.rstrip("/") for e in endpoints]
        self._next_url = itertools.cycle(self.urls)
        self._url_lock = threading.Lock()
        self.model_name = str(o.get("model") or self.config.model_name or "whisper")
        self.language = o.get("language")
        self.timeout_s = float(o.get("timeout_s", 600))
        self.concurrency = int(o.get("concurrency", 8))
        if self.concurrency < 1 or self.timeout_s <= 0:
            raise PredictorError("framework 'openai-audio': options.concurrency must be at least 1 and timeout_s "
                                 "positive")
        key_env = o.get("api_key_env")
        self.api_key = os.environ.get(str(key_env), "") if key_env else ""
        self.sample_rate = int(o.get("sample_rate") or self._input_rate())
        self.respond = response_function(o.get("response"))
        self.tokenizer = None
        folder = o.get("tokenizer") or (self.config.model_path if self.config.model_path and
                                        os.path.isdir(self.config.model_path) else None)
        if folder:
            from transformers import AutoTokenizer

            try:
                self.tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(str(folder)))
            except (OSError, ValueError) as e:
                raise PredictorError(f"openai-audio: cannot load the tokenizer {folder}: {e}") from e
        self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="mlharness-openai-audio")

    def _input_rate(self) -> int:
        for spec in self.config.input_specs:
            rate = (spec.get("parameters") or {}).get("sample_rate")
            if spec.get("type") == "audio" and rate:
                return int(rate)
        return 16000

    def run_engine(self) -> None:
        """Every waiting request goes to the pool at once (at most ``concurrency`` in flight)."""
        while (batch := self.take(1 << 30)) is not None:
            for item in batch:
                self._pool.submit(self._one, *item)

    def _one(self, request: TokenRequest, stream: OnceStream) -> None:
        try:
            text = self.transcribe(request)
            response = None if self.respond is None else np.asarray(self.respond(text), dtype=np.int64)
            if self.tokenizer is not None:
                ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            elif response is not None:
                ids = response.tolist()
            else:
                raise PredictorError("openai-audio answers token ids only with options.tokenizer or "
                                     "options.response set")
            if ids:
                stream.first(np.asarray(ids[:1], dtype=np.int32))
            finish(stream, ids, response)
        except BaseException as e:  # noqa: BLE001 - every request must end
            stream.fail(e)
        finally:
            self.finished(1)

    def transcribe(self, request: TokenRequest) -> str:
        """The server's transcript of one sample."""
        fields = {"model": self.model_name, "temperature": "0", "response_format": "json"}
        if self.language:
            fields["language"] = str(self.language)
        body, content_type = multipart(fields, wav_bytes(request.prompt, self.sample_rate),
                                       f"sample-{request.index}.wav")
        with self._url_lock:
            url = next(self._next_url)
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        where = f"{url} (sample {request.index})"
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", errors="replace")
            raise PredictorError(f"{where} answered HTTP {e.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as e:
            raise PredictorError(f"{where} failed: {getattr(e, 'reason', e)}") from None
        try:
            text = json.loads(raw)["text"]
        except (ValueError, KeyError, TypeError):
            raise PredictorError(f"{where} answered no JSON object with a 'text' field: {raw[:200]!r}") from None
        if not isinstance(text, str):
            raise PredictorError(f"{where} answered a 'text' that is no string: {text!r}")
        return text

    def close(self) -> None:
        super().close()
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def framework_version(self) -> str:
        return "http"

    def computes_off_host(self) -> bool:
        return True

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "endpoints": getattr(self, "urls", []), "concurrency": getattr(self, "concurrency", None)}
