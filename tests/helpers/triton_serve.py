"""Serve mlharness's demo and ResNet50-oracle ONNX models from a real NVIDIA Triton Inference Server.

Run with the Python of a virtual environment that holds ``nvidia-pytriton`` and ``onnxruntime`` (it cannot
share mlharness's: PyTriton pins numpy<2), e.g.::

    .ci-triton/bin/python tests/helpers/triton_serve.py --workspace /tmp/w --demo demo.onnx \
        --oracle resnet50_oracle.onnx

Triton binds 127.0.0.1 only, on free gRPC, HTTP and metrics ports chosen here; once it serves, one line
``triton grpc listening on 127.0.0.1:PORT, http on 127.0.0.1:PORT`` is printed. Each model runs its ONNX file
with ONNX Runtime behind Triton's dynamic batcher, under the name and with the input/output tensors of its
mlharness manifest (``demo``: image FP32 [-1, 3, 32, 32] -> label INT64 [-1, 1]; ``resnet50-oracle``:
input_tensor:0 FP32 [-1, 3, 224, 224] -> ArgMax:0 INT64 [-1, 1], softmax_tensor:0 FP32 [-1, 1001]). Triton
requires at least one dimension per sample in a batched output, so a model's per-sample scalar (the label) is
served as [1]. SIGTERM/SIGINT stop the server. This file imports nothing from mlharness: it runs in Triton's
environment, not the project's.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import site
import socket
import sys
import sysconfig
import threading
from pathlib import Path

READY_LINE = "triton grpc listening on 127.0.0.1:{grpc}, http on 127.0.0.1:{http}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def use_this_libpython() -> None:
    """Make Triton's Python-backend stub load this interpreter's libpython, not another build of the same
    minor version found first on the system path: a stub running pyenv's 3.11 standard library on Debian's
    3.11 runtime fails at model load (``'_thread.RLock' object has no attribute '_recursion_count'``)."""
    libdir = sysconfig.get_config_var("LIBDIR")
    if not (sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir
            and (Path(libdir) / str(sysconfig.get_config_var("LDLIBRARY"))).is_file()):
        return  # a static interpreter: the stub uses the system's libpython
    _prepend("LD_LIBRARY_PATH", libdir)


def use_this_environment() -> None:
    """The stub embeds Python without knowing of this virtual environment: put its packages first on the
    stub's path, or the base interpreter's own numpy (say 2.x against PyTriton's 1.x) serves the model."""
    _prepend("PYTHONPATH", *site.getsitepackages())


def _prepend(variable: str, *paths: str) -> None:
    current = os.environ.get(variable)
    os.environ[variable] = os.pathsep.join([*paths, current] if current else paths)


def onnx_infer(path: Path, inputs: list[str], outputs: list[str], threads: int):
    """An infer function for PyTriton's ``@batch``: the named inputs in, the ONNX file's named outputs out."""
    import numpy as np
    import onnxruntime as ort
    from pytriton.decorators import batch

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    served = {i.name for i in session.get_inputs()}
    if set(inputs) != served:
        raise SystemExit(f"{path}: the ONNX model takes inputs {sorted(served)}, expected {sorted(inputs)}")
    lock = threading.Lock()

    @batch
    def infer(**tensors):
        feed = {name: np.ascontiguousarray(tensors[name]) for name in inputs}
        with lock:
            results = session.run(outputs, feed)
        # Triton gives every batched output at least one dimension per sample: a label becomes [N, 1]. ONNX
        # Runtime's int64 is C long long, which numpy 1.x does not count as np.int64 (C long) and PyTriton
        # refuses; a view as the canonical dtype of the same bytes is.
        return {name: r.reshape(len(r), -1).view(r.dtype.str)
                for name, r in zip(outputs, results, strict=True)}

    return infer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workspace", required=True, type=Path,
                   help="PyTriton's workspace (model store, sockets): a folder it creates")
    p.add_argument("--demo", type=Path, help="the demo's ONNX model (served as 'demo')")
    p.add_argument("--oracle", type=Path, help="the ResNet50 oracle's ONNX model ('resnet50-oracle')")
    p.add_argument("--log-file", type=Path, help="Triton's own log (default: this process's output)")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--max-queue-delay-us", type=int, default=500,
                   help="how long Triton's dynamic batcher waits for more requests")
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads per model")
    args = p.parse_args(argv)
    if not (args.demo or args.oracle):
        p.error("nothing to serve: pass --demo and/or --oracle")
    for path in (args.demo, args.oracle):
        if path is not None and not path.is_file():
            p.error(f"no such ONNX file: {path}")

    try:
        import numpy as np
        import onnxruntime  # noqa: F401 - the models run on it
        from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
        from pytriton.triton import DEFAULT_PROTECTED_ENDPOINTS, Triton, TritonConfig, TritonSecurityConfig
    except ImportError as e:
        print(f"{sys.executable} lacks what Triton's side needs ({e}); install nvidia-pytriton and "
              f"onnxruntime into its environment", file=sys.stderr, flush=True)
        return 2

    use_this_libpython()
    use_this_environment()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    grpc_port, http_port = free_port(), free_port()
    config = TritonConfig(grpc_address="127.0.0.1", grpc_port=grpc_port, http_address="127.0.0.1",
                          http_port=http_port, metrics_address="127.0.0.1", metrics_port=free_port(),
                          allow_gpu_metrics=False, exit_timeout_secs=5, log_file=args.log_file)
    model_config = ModelConfig(max_batch_size=args.max_batch_size,
                               batcher=DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us))
    # PyTriton guards Triton's administrative endpoints with a token; statistics (read-only: how many samples
    # and executions each model ran) stay open, for tests that check Triton's dynamic batching
    security = TritonSecurityConfig(restricted_endpoints=[e for e in DEFAULT_PROTECTED_ENDPOINTS
                                                          if e != "statistics"])
    triton = Triton(config=config, workspace=args.workspace, security_config=security)
    stopping = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if args.demo:
            triton.bind(model_name="demo",
                        infer_func=onnx_infer(args.demo, ["image"], ["label"], args.threads),
                        inputs=[Tensor(name="image", dtype=np.float32, shape=(3, 32, 32))],
                        outputs=[Tensor(name="label", dtype=np.int64, shape=(1,))],
                        config=model_config, strict=True)
        if args.oracle:
            outs = ["ArgMax:0", "softmax_tensor:0"]
            triton.bind(model_name="resnet50-oracle",
                        infer_func=onnx_infer(args.oracle, ["input_tensor:0"], outs, args.threads),
                        inputs=[Tensor(name="input_tensor:0", dtype=np.float32, shape=(3, 224, 224))],
                        outputs=[Tensor(name="ArgMax:0", dtype=np.int64, shape=(1,)),
                                 Tensor(name="softmax_tensor:0", dtype=np.float32, shape=(1001,))],
                        config=model_config, strict=True)
        triton.run()  # starts tritonserver and waits until the models are loaded
        print(READY_LINE.format(grpc=grpc_port, http=http_port), flush=True)
        while not stopping.wait(0.5):
            if not triton.is_alive():
                print("triton server exited", file=sys.stderr, flush=True)
                return 1
    finally:
        triton.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
