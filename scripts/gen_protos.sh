#!/usr/bin/env bash
# Regenerate the Open Inference Protocol (KServe v2) gRPC modules from mlharness/agent/protos/*.proto.
# Needs grpcio-tools (pip install grpcio-tools). The generated files are committed; never edit them by hand.
# Run from anywhere: paths are resolved against the repository root so the generated imports are
# package-qualified (from mlharness.agent.protos import grpc_predict_v2_pb2).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ -n "${PYTHON:-}" ]]; then
  PY="$PYTHON"
elif [[ -x .venv/bin/python ]]; then
  PY=.venv/bin/python
else
  PY=python3
fi

"$PY" -m grpc_tools.protoc -I . \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  mlharness/agent/protos/grpc_predict_v2.proto
touch mlharness/agent/protos/__init__.py
echo "generated: $(ls mlharness/agent/protos/*_pb2*.py* | tr '\n' ' ')"
