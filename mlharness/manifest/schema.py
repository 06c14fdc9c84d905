"""Manifest spec v1 as typed models.

Unknown keys are errors everywhere except the open bags (``attributes``, ``framework.options``,
``accuracy.options``, tensor ``parameters``), so a typo surfaces with its field path instead of being ignored.
The field docstrings are the reference: ``docs/manifest.md`` is checked against them by a test.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlharness.manifest.hookguard import check_timeout_s
from mlharness.manifest.names import safe_name
from mlharness.manifest.published import Published

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
HOOK_KEYS = ("before_preprocess", "preprocess", "after_preprocess", "before_postprocess", "postprocess",
             "after_postprocess")
DATASET_HOOK_KEYS = ("init", "load", "unload")
# beside MLHarness's three: ``sample(index)``, what preprocess gets instead of the index (MLModelScope's convention)
DATASET_ALL_HOOK_KEYS = DATASET_HOOK_KEYS + ("sample",)
# An mlharness extension beside the six MLHarness hooks: replaces the plain ``predictor.predict(batch)`` call
# in the timed path, e.g. for sliding-window inference that runs the model on many patches per sample.
EXTRA_HOOK_KEYS = ("predict",)
MODEL_HOOK_KEYS = HOOK_KEYS + EXTRA_HOOK_KEYS
ELEMENT_TYPES = ("float16", "float32", "float64", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool",
                 "bytes")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class HookRef(_Strict):
    """A hook defined in a Python file beside the manifest instead of inline source."""

    file: str
    """Path of the Python file, relative to the manifest."""
    function: str | None = None
    """Name of the function in that file; defaults to the hook's own name."""


Hook = str | HookRef


def _unwrap(value: Any) -> Any:
    """MLModelScope manifests wrap parameter values as ``{value: x}`` or ``{default: x}``."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("value", "default"):
        return next(iter(value.values()))
    return value


class TensorSpec(_Strict):
    """One model input or output. Accepts the MLModelScope form (``type``, ``description``, ``parameters``) and the
    flat form (``name``, ``shape``, ``element_type``)."""

    name: str | None = None
    """Tensor name in the model graph; matched to the framework's names. MLModelScope's ``parameters.input_layer``
    is accepted too. Without one, tensors are matched by position."""
    type: str = "tensor"
    """What the tensor carries (image, text, probability, ...); informational, except ``chat``: the prompt is
    chat messages (``parameters``: ``max_image_bytes``, ``max_image_pixels``), and ``session``: each sample is a
    session of turns (``parameters``: the replay options, ``timing``, ``concurrency``, SLOs; docs/sessions.md), and
    ``jagged``: id lists batched as values and offsets, maybe in time order (``parameters``: docs/recommendation.md)."""
    description: str = ""
    element_type: str = "float32"
    """numpy-style dtype name of the tensor."""
    shape: list[int | str] | None = None
    """Shape of ONE sample, without the batch axis; -1 or a name marks a dynamic axis."""
    layout: str | None = None
    """Data layout of one sample, e.g. CHW or HWC."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Open bag of further facts (mean, scale, color_mode, ...), passed to hooks through ``ctx``."""

    @model_validator(mode="before")
    @classmethod
    def _from_mlmodelscope(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("parameters"), dict):
            return data
        data = dict(data)
        params = {k: _unwrap(v) for k, v in data["parameters"].items()}
        for src, dst in (
            ("element_type", "element_type"),
            ("dimensions", "shape"),
            ("layout", "layout"),
            ("input_layer", "name"),
            ("output_layer", "name"),
        ):
            if src in params and dst not in data:
                data[dst] = params[src]
        data["parameters"] = params
        return data

    @field_validator("element_type")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        if v not in ELEMENT_TYPES:
            raise ValueError(f"unknown element_type '{v}'; expected one of {', '.join(ELEMENT_TYPES)}")
        return v

    @field_validator("shape")
    @classmethod
    def _valid_shape(cls, v: list[int | str] | None) -> list[int | str] | None:
        if v is None:
            return v
        for i, d in enumerate(v):
            if isinstance(d, bool) or (isinstance(d, int) and d != -1 and d < 1):
                raise ValueError(f"dimension {i} is {d!r}; expected a positive int, -1 or a name for a dynamic axis")
        return v


class FrameworkSpec(_Strict):
    name: str
    """Predictor backend: onnxruntime (more in later releases: pytorch, tensorflow, remote)."""
    version: str = "*"
    """PEP 440 version constraint on the framework package, e.g. ``>=1.16``; ``*`` accepts any."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Framework session options (onnxruntime: intra_op_num_threads, inter_op_num_threads, providers,
    graph_optimization_level, execution_mode, ...; pytorch: dtype, factory_args, channels_last; tensorflow:
    signature, inter_op_threads; transformers: dtype, attn_implementation; vllm: ``EngineArgs`` fields such as
    tensor_parallel_size, max_num_seqs, gpu_memory_utilization; token-toy: first_token_ms, token_ms, n_tokens,
    fail_after, fail_sample, one_token_sample, short_sample, short_tokens)."""
    warmup: int = Field(3, ge=0)
    """Batches run through the model before LoadGen starts timing (excluded from the results)."""


class ModelAsset(_Strict):
    graph_path: str | None = None
    """Local path (relative to the manifest) or URL of the model file; joined to ``base_url`` when given.
    Required unless ``factory`` builds the model."""
    base_url: str | None = None
    graph_checksum: str | None = None
    """md5 or sha256 digest (bare hex or ``sha256:<hex>``), verified after download and before each use."""
    is_archive: bool = False
    """The asset is a .tar/.tar.gz/.zip to unpack; ``graph_path`` then names the archive."""
    model_file: str | None = None
    """With ``is_archive``: the path of the model inside the unpacked archive."""
    generator: str | None = None
    """``module:function`` that writes the model to the path it is given, for models the project generates
    (the demo's oracle, random-weight test models); the result is cached like a download."""
    factory: str | None = None
    """PyTorch: ``module:function`` returning an ``nn.Module`` (called with ``framework.options.factory_args``);
    its weights come from ``weights_path``."""
    weights_path: str | None = None
    """State-dict file (path or URL, like ``graph_path``) for a ``factory`` model; unused by ONNX."""
    weights_checksum: str | None = None
    """md5 or sha256 of ``weights_path``."""
    features_path: str | None = None
    """MLModelScope: the class names, one per line (a synset); the generic classification metrics read it to
    match labels given as names."""
    features_checksum: str | None = None
    """md5 or sha256 of ``features_path``."""


class MLPerfSpec(_Strict):
    model: str | None = None
    """Model name for mlperf.conf / user.conf lookups (resnet50, bert, 3d-unet). Without it the run uses the
    manifest's name with the ``*`` defaults and is marked as not an official benchmark."""
    benchmark: str | None = None
    """Benchmark directory name in results trees (resnet, bert-99, 3d-unet-99); defaults to ``model``."""

    @field_validator("model", "benchmark")
    @classmethod
    def _safe(cls, v: str | None) -> str | None:
        return v if v is None else safe_name(v)


class ResponseSpec(_Strict):
    kind: str = "tensor"
    """A data kind that responds (mlharness/kinds/; the run checks the name). ``tensor``: one response per sample
    from ``postprocess``. ``tokens``: the model generates a stream of token
    ids per sample (a generative predictor); the run measures token latencies (TTFT, TPOT), reports the first
    token to LoadGen as soon as it exists and writes every token id as int32 (int64 where ``element_type`` says
    so: what the whisper accuracy script reads by default). ``video``: one video per sample, its frames as the
    first output declares them ([frames, height, width, 3]), uint8 or float32, at ``fps`` (docs/video.md)."""
    element_type: str = "float32"
    """dtype in which each sample's response is written to LoadGen (what the accuracy script decodes)."""
    text: bool = False
    """With ``kind: tokens`` and ``element_type: uint8``: each sample's response is the generated text as UTF-8
    bytes (qwen3-vl's accuracy script reads text); ``n_tokens`` stays the count of generated token ids."""
    fps: float | None = Field(None, gt=0)
    """With ``kind: video``, required (checked with the frames' shape by ``kinds/video/kind.py``): the frame rate."""

    @model_validator(mode="before")
    @classmethod
    def _tokens_are_int32(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("text") and data.get("kind") != "tokens":
            raise ValueError("field 'text': text responses are generated: they need kind 'tokens'")
        if isinstance(data, dict) and data.get("kind") == "session":
            return {**data, "element_type": "uint8"}  # the answers' JSON as UTF-8 bytes
        if isinstance(data, dict) and data.get("kind") == "tokens":
            allowed = ("uint8",) if data.get("text") is True else ("int32", "int64")
            if data.get("element_type", allowed[0]) not in allowed:
                raise ValueError("text responses are UTF-8 bytes: declare element_type uint8" if data.get("text")
                                 else "token responses are int32 token ids (or int64 ones); drop element_type "
                                 "or declare int32 or int64")
            data = {**data, "element_type": data.get("element_type", allowed[0])}
        return data

    @field_validator("element_type")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        v = TensorSpec._known_dtype(v)
        if v == "bfloat16":  # numpy_dtype() cannot encode it; say so here rather than mid-run
            raise ValueError("bfloat16 responses are not supported (numpy has no bfloat16); declare float32")
        return v


class GenerationSpec(_Strict):
    """How a generative model generates (``response.kind: tokens``); greedy unless it says otherwise."""

    max_new_tokens: int = Field(128, ge=2)
    """Most new tokens per sample (the llama3.1-8b reference: 128)."""
    min_new_tokens: int = Field(2, ge=2)
    """Fewest new tokens per sample, EOS suppressed until then; at least 2, since LoadGen refuses a one-token
    response."""
    do_sample: bool = False
    """Sample instead of greedy decoding."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature (with ``do_sample``)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling probability mass (with ``do_sample``)."""
    top_k: int = Field(0, ge=0)
    """Sample from the k most likely tokens; 0 = all (with ``do_sample``)."""
    stop_token_ids: list[int] = Field(default_factory=list)
    """Token ids that end a sample besides the tokenizer's EOS."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Engine-specific generation arguments: transformers, further ``generate()`` keywords (e.g.
    ``repetition_penalty``); vllm, further ``SamplingParams`` fields (e.g. ``seed``)."""

    @model_validator(mode="after")
    def _min_below_max(self) -> GenerationSpec:
        if self.min_new_tokens > self.max_new_tokens:
            raise ValueError(f"min_new_tokens {self.min_new_tokens} exceeds max_new_tokens {self.max_new_tokens}")
        return self


class AccuracySpec(_Strict):
    metric: str
    """Name of a registered accuracy metric (imagenet_top1, ...)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Passed to the metric, e.g. ``{val_map: val_map.txt, dtype: float32}``."""


class BatchingSpec(_Strict):
    max_batchsize: int = Field(1, ge=1)
    """Largest batch for every scenario unless the scenario's own key says otherwise."""
    SingleStream: int | None = Field(None, ge=1)
    MultiStream: int | None = Field(None, ge=1)
    Server: int | None = Field(None, ge=1)
    Offline: int | None = Field(None, ge=1)
    server_max_wait_ms: float = Field(0.0, ge=0)
    """Server: how long the first sample of a partial batch may wait for company before it runs anyway."""

    def for_scenario(self, scenario: str) -> int:
        return getattr(self, scenario) or self.max_batchsize


class HooksSpec(_Strict):
    """Limits on the manifest's code: its hooks, its dataset manifest's hooks and ``model.generator``."""

    timeout_s: float | dict[str, float] | None = None
    """Seconds one call may run before the run ends with exit status 3 naming the hook (a running hook cannot be
    interrupted): one number for every hook, or a mapping from hook name (``module`` for the hooks' module-level
    code, ``generator`` for ``model.generator``) to seconds, the others keeping their defaults."""

    _deadlines = field_validator("timeout_s", mode="before")(check_timeout_s)


class DatasetManifest(_Strict):
    """Dataset manifest: ``init(count)`` returns the dataset size, ``load(sample_list)`` / ``unload(sample_list)``
    bring samples in and out of memory. Its hooks share one namespace with the model's hooks."""

    name: str
    """Name of the dataset; letters, digits and ``. _ + -``, at most 128 characters."""
    version: str = "1.0"
    description: str = ""
    path: str | None = None
    """Default dataset folder (overridden by ``--dataset-path``); relative to the manifest."""
    attributes: dict[str, Any] = Field(default_factory=dict)
    init: Hook | None = None
    load: Hook | None = None
    unload: Hook | None = None
    load_workers: int | None = Field(default=None, ge=0)
    """Threads running ``preprocess`` at load time when ``--load-workers`` is not given; 0 = one per CPU core."""
    sample: Hook | None = None
    """``sample(index)``: what ``preprocess`` gets for a sample instead of its index, e.g. the file's path (the
    MLModelScope convention; the built-in ``files`` dataset manifest)."""
    accuracy: AccuracySpec | None = None
    """The accuracy metric of a run whose model manifest declares none (e.g. top-1 on the folder's labels)."""

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        return safe_name(v)


class FrameworkVariant(_Strict):
    """The same model in another framework: selected with ``--framework NAME`` or ``manifest@NAME``. Its keys
    replace the manifest's; everything else (hooks, dataset, accuracy) is shared, and hooks can read the
    selected framework from ``ctx["framework"]`` (e.g. to pick NHWC for TensorFlow)."""

    framework: FrameworkSpec
    model: ModelAsset | None = None
    inputs: list[TensorSpec] | None = None
    outputs: list[TensorSpec] | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)
    """Merged over the manifest's attributes."""


class ModelManifest(_Strict):
    name: str
    """Name of the model: a folder name in caches and (without ``mlperf.benchmark``) in results trees, so
    letters, digits and ``. _ + -`` only, at most 128 characters."""
    version: str = "1.0"
    description: str = ""
    manifest_version: Literal[1] = 1
    framework: FrameworkSpec
    modality: str = "general"
    """image_classification, question_answering, image_segmentation, ... (informational)."""
    inputs: list[TensorSpec] = Field(min_length=1)
    outputs: list[TensorSpec] = Field(min_length=1)
    model: ModelAsset | None = None
    """The model file. Required by file-based frameworks (onnxruntime); toy and remote predictors need none."""
    attributes: dict[str, Any] = Field(default_factory=dict)
    """Open bag passed to hooks as ``ctx['attributes']``."""
    dataset: str | DatasetManifest | None = None
    """A dataset manifest: a built-in name, a path relative to this manifest, or the section inline."""
    mlperf: MLPerfSpec = Field(default_factory=MLPerfSpec)
    response: ResponseSpec = Field(default_factory=ResponseSpec)
    generation: GenerationSpec = Field(default_factory=GenerationSpec)
    """Generation settings of a token-stream model (``response.kind: tokens``); ignored otherwise."""
    accuracy: AccuracySpec | None = None
    batching: BatchingSpec = Field(default_factory=BatchingSpec)
    hooks: HooksSpec = Field(default_factory=HooksSpec)
    """Deadlines of the hooks' calls (``hooks.timeout_s``)."""
    before_preprocess: Hook | None = None
    preprocess: Hook | None = None
    after_preprocess: Hook | None = None
    before_postprocess: Hook | None = None
    postprocess: Hook | None = None
    after_postprocess: Hook | None = None
    frameworks: dict[str, FrameworkVariant] = Field(default_factory=dict)
    """The model in other frameworks, keyed by framework name (see FrameworkVariant)."""
    predict: Hook | None = None
    """Optional ``predict(ctx, run, inputs)``: replaces ``run(inputs)`` (the predictor) in the timed path; returns
    the outputs list that ``postprocess`` receives. For inference that calls the model several times per batch."""
    published: Published | None = None
    """Authors, domain, keywords, license, DOI and the work to cite (``manifest show``, ``search``, ``cite``)."""
    # MLModelScope manifests carry these: license is shown where ``published`` gives none; container is ignored.
    license: str | None = None
    container: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        return safe_name(v)

    @model_validator(mode="after")
    def _chat_alone(self) -> ModelManifest:
        if any(i.type == "chat" for i in self.inputs) and (len(self.inputs) > 1 or not streams_tokens(self)):
            raise ValueError("an input of type 'chat' (the prompt's messages) is a generative model's only input: "
                             "declare it alone, with response.kind 'tokens'")
        sessions = any(i.type == "session" for i in self.inputs)
        if (sessions or self.response.kind == "session") and (len(self.inputs) > 1 or not sessions
                                                               or self.response.kind != "session"):
            raise ValueError("a session model has one input, of type 'session' (each sample a session of turns), "
                             "and response.kind 'session': declare both")
        return self

    @field_validator("framework", mode="before")
    @classmethod
    def _framework_lowercase(cls, v: Any) -> Any:
        if isinstance(v, dict) and isinstance(v.get("name"), str):
            v = {**v, "name": v["name"].lower()}
        return v


def streams_tokens(model: ModelManifest) -> bool:
    """True when the model's responses are token streams (a generative model)."""
    return model.response.kind == "tokens"


def numpy_dtype(element_type: str) -> np.dtype:
    if element_type == "bytes":
        return np.dtype(np.uint8)
    if element_type == "bfloat16":
        raise ValueError("bfloat16 responses are not supported by numpy; declare float32")
    return np.dtype(element_type)
