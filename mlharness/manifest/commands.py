"""``mlharness manifest list|validate|init``: none of them runs a hook. ``validate`` imports the modules of
``model.generator`` / ``model.factory`` (which runs their module-level code, never the function) when they are
installed, and when they live beside the manifest only with ``--trust``."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mlharness.errors import ManifestError, MLHarnessError
from mlharness.manifest import modelcheck, safeyaml
from mlharness.manifest.hooks import check_hooks, read_hook_file
from mlharness.manifest.imports import missing_imports
from mlharness.manifest.loader import LoadedManifest, load_manifest, manifest_dirs
from mlharness.manifest.schema import DATASET_ALL_HOOK_KEYS, MODEL_HOOK_KEYS, HookRef
from mlharness.manifest.targets import beside_manifest, check_importable

SKELETON = '''\
# Model manifest (spec v1) -- see docs/manifest.md for every field.
name: {name}
version: "1.0"
description: what this model is
framework:
  name: onnxruntime          # predictor backend
  version: ">=1.16"          # PEP 440 constraint on the framework package, or "*"
modality: image_classification
inputs:                      # one entry per model input, shapes WITHOUT the batch axis
  - name: input              # tensor name in the graph (omit to match by position)
    element_type: float32
    layout: CHW
    shape: [3, 224, 224]
outputs:
  - name: output
    element_type: float32
model:
  graph_path: model.onnx     # relative to this file, or a URL (or base_url + graph_path)
  # graph_checksum: sha256:<hex>   # verified after download and before every use
mlperf:
  model: null                # resnet50 / bert / 3d-unet for official conf lookups; null = not an official benchmark
  benchmark: null            # results directory name (resnet, bert-99, 3d-unet-99)
response:
  element_type: float32      # dtype of each response written to LoadGen
# accuracy:
#   metric: imagenet_top1
#   options: {{val_map: val_map.txt}}
batching:
  max_batchsize: 1
  Offline: 32
  server_max_wait_ms: 1.0
dataset:                     # or the name/path of a dataset manifest
  name: {name}_data
  path: data                 # default dataset folder (--dataset-path overrides)
  init: |
    def init(count):
        # return the number of samples available (at most count when count is given)
        global FILES
        import os
        FILES = sorted(os.listdir(ctx["dataset_path"]))
        return min(count, len(FILES)) if count else len(FILES)
  load: |
    def load(sample_list):
        pass                 # bring raw samples into memory if useful
  unload: |
    def unload(sample_list):
        pass
preprocess: |
  import numpy as np

  def preprocess(ctx, index):
      # untimed: runs when LoadGen loads the sample; return one array per model input
      raise NotImplementedError("read FILES[index] and return the model input")
postprocess: |
  import numpy as np

  def postprocess(ctx, outputs):
      # timed: outputs holds one batch-first array per model output; return one response per sample
      return outputs[0].astype(np.float32)
'''


def list_manifests(out: Console, extra: list[Path]) -> int:
    table = Table("name", "kind", "framework", "mlperf model", "path")
    roots = manifest_dirs() + [p for p in extra]
    for root in roots:
        for path in sorted(list(root.rglob("*.yaml")) + list(root.rglob("*.yml"))):
            try:
                data = safeyaml.safe_load_file(path)
            except (OSError, ValueError) as e:
                table.add_row(escape(path.stem), "[red]unreadable[/]", "", "", escape(f"{path}: {e}"))
                continue
            if not isinstance(data, dict):
                continue
            kind = "model" if "framework" in data else "dataset"
            fw = (data.get("framework") or {}).get("name", "") if kind == "model" else ""
            mlperf = (data.get("mlperf") or {}).get("model") or "" if kind == "model" else ""
            table.add_row(*(escape(str(v)) for v in (data.get("name", path.stem), kind, fw, mlperf, path)))
    out.print(table)
    return 0


def validate(out: Console, ref: str, dataset_path: str | None, trust: bool = False) -> int:
    from mlharness.fileguard import check_regular_file
    from mlharness.manifest.assets import verify_checksum

    loaded = load_manifest(ref)
    from mlharness.kinds.registry import check_inputs
    from mlharness.loadgen.bounds import check_manifest_numbers

    check_manifest_numbers(loaded)  # the numbers a run checks before it starts
    check_inputs(loaded)  # and its input kind's parameters (a pipeline's stages)
    hooks = check_hooks(loaded)
    asset = loaded.model.model
    notes = list(loaded.notes)
    model_file = None
    notes += check_imports(loaded, trust)
    notes.append(modelcheck.check_version(loaded))
    if asset is None:
        notes.append("no model file (the predictor needs none)")
    elif asset.generator:
        notes.append(f"model generated by {asset.generator}")
    elif asset.factory and asset.graph_path is None:
        # a pytorch factory model: the file to check is the state dict, if any
        weights = asset.weights_path
        if weights is None:
            notes.append(f"model built by {asset.factory} (no weights_path: random weights)")
        elif "://" in weights or asset.base_url:
            notes.append(f"model built by {asset.factory}; weights downloaded on first use"
                         + ("; checksum declared" if asset.weights_checksum else " without a checksum"))
        else:
            path = loaded.directory / Path(weights).expanduser()  # ~ as run resolves it
            if not path.exists():
                raise MLHarnessError(f"{loaded.path}: field 'model.weights_path': {path} does not exist")
            verify_checksum(path, asset.weights_checksum)
            notes.append(f"model built by {asset.factory}; weights {path} present")
    elif "://" in asset.graph_path or asset.base_url:
        if not asset.graph_checksum:
            notes.append("model is downloaded without a checksum (add model.graph_checksum)")
        else:
            notes.append("model is downloaded on first use; checksum declared")
    else:
        path = loaded.directory / Path(asset.graph_path).expanduser()  # ~ as run resolves it
        if not path.exists():
            if path.is_symlink():
                raise ManifestError(loaded.path, "model.graph_path", f"{path} is a symbolic link that leads nowhere "
                                    "(a loop of links or a missing target)")
            raise MLHarnessError(f"{loaded.path}: field 'model.graph_path': {path} does not exist")
        if not path.is_dir():  # a FIFO or a device would hang the framework's load below
            check_regular_file(path, "model file", error=lambda m: ManifestError(loaded.path, "model.graph_path", m))
        verify_checksum(path, asset.graph_checksum)
        notes.append(f"model file {path} present" + (", checksum ok" if asset.graph_checksum else ""))
        model_file = path
    if model_file is not None and loaded.model.framework.name == "onnxruntime":
        notes.append(modelcheck.check_onnx(loaded, model_file))
    elif model_file is not None and loaded.model.framework.name in ("pytorch", "tensorflow"):
        notes.append(modelcheck.check_loads(loaded, model_file))
    elif loaded.model.framework.name == "transformers":
        notes.append(modelcheck.check_transformers(loaded, model_file))
    ds_dir = dataset_path or (loaded.dataset.path if loaded.dataset and loaded.dataset.path else None)
    if ds_dir is not None:
        p = Path(ds_dir) if dataset_path else loaded.dataset_directory / ds_dir
        if not p.exists():
            raise MLHarnessError(f"dataset path {p} does not exist")
        notes.append(f"dataset path {p} present")
    out.print(f"[green]valid[/]: {escape(str(loaded.path))}")
    out.print(f"  hooks: {', '.join(hooks) or 'none'}")
    for n in notes:
        out.print(f"  {escape(n)}")
    return 0


def check_imports(loaded: LoadedManifest, trust: bool = False) -> list[str]:
    """The factory's and generator's modules import (one beside the manifest only with ``trust``: importing runs
    its code), and every module a hook imports at its top level can be found (beside the manifest or installed);
    no hook runs and no model is built. Returns what was left unchecked."""
    asset = loaded.model.model
    notes = []
    for field in ("factory", "generator"):
        target = getattr(asset, field, None) if asset is not None else None
        if not target:
            continue
        local = beside_manifest(target, loaded.directory)
        if local is not None and not trust:
            notes.append(f"field 'model.{field}': module {local} beside the manifest was NOT imported, since "
                         f"importing runs its code; 'mlharness manifest validate --trust' imports it")
            continue
        check_importable(loaded, f"model.{field}")
    sections = [(loaded.model, MODEL_HOOK_KEYS, loaded.source.path, "")]
    if loaded.dataset is not None:
        ds_path = (loaded.dataset_source or loaded.source).path
        sections.append((loaded.dataset, DATASET_ALL_HOOK_KEYS, ds_path, "" if loaded.dataset_source else "dataset."))
    for owner, keys, path, prefix in sections:
        for key in keys:
            hook = getattr(owner, key, None)
            if isinstance(hook, HookRef):
                file = (path.parent / hook.file)
                field = f"{prefix}{key}.file"
                text = read_hook_file(path, field, file) if file.is_file() else ""
            else:
                text, field = hook or "", prefix + key
            for name in missing_imports(text):
                raise ManifestError(path, field, f"the hook imports module '{name}', which is neither installed "
                                                 f"nor beside the manifest ({path.parent})")
    return notes


def init(out: Console, name: str, output: Path | None) -> int:
    path = output or Path(f"{name}.yaml")
    if path.exists():
        raise MLHarnessError(f"{path} exists; not overwriting it")
    path.write_text(SKELETON.format(name=name))
    out.print(f"wrote {escape(str(path))}; fill it in, then: mlharness manifest validate {escape(str(path))}")
    return 0
