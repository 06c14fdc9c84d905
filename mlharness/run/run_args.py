"""The options of every command that runs LoadGen (``run``, ``sweep``, ``submission run``, ``tune``, ``bench``),
defined once: each flag has one name, one destination, one default and one help text wherever it appears, so
``--min-duration-ms`` means the same on ``run`` as on ``sweep``. A command adds the groups (or single flags) it
honours with :func:`add_run_options`, then its own; :func:`run_options` turns the parsed flags into the
:class:`RunOptions` of one run. Old spellings stay as :func:`deprecated_alias`: they still work and say the new
name once."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mlharness.manifest.schema import SCENARIOS

ENDPOINT_MANIFEST = "llama3.1-8b-random"  # --endpoint without --manifest: a generative model on synthetic prompts

# (group, flags, argparse keyword arguments); the order is the order of --help
_FLAGS: list[tuple[str, tuple[str, ...], dict[str, Any]]] = [
    ("model", ("--manifest",), dict(default=None, help="model manifest: a path or a built-in name (default: the "
                                    f"demo; with --endpoint: {ENDPOINT_MANIFEST}, a generative model on synthetic "
                                    "prompts)")),
    ("model", ("--framework",), dict(default=None, help="run the manifest's variant for this framework: "
                                     "a key of its 'frameworks' section (e.g. pytorch, tensorflow, transformers, "
                                     "vllm); also MANIFEST@FRAMEWORK")),
    ("model", ("--device",), dict(default="cpu", help="cpu or cuda[:N]")),
    ("model", ("--round",), dict(default=None, help="MLPerf Inference round whose seeds the run uses (v6.0, v6.1; "
                                 "default: v6.1, the round of the pinned LoadGen)")),
    ("dataset", ("--dataset",), dict(default=None, help="dataset manifest (path or built-in name), overriding the "
                                     "model's")),
    ("dataset", ("--dataset-path",), dict(default=None, help="folder of the dataset files")),
    ("dataset", ("--count",), dict(type=int, default=None, help="use only the first N dataset samples (not "
                                   "submittable)")),
    # choices are checked by the library, so a typo gets a 'did you mean' instead of argparse's list
    ("sizing", ("--scenario",), dict(required=True, help=f"one of {', '.join(SCENARIOS)}, or "
                                     "Interactive (a token-stream model run as Server under the <model>-interactive "
                                     "settings)")),
    ("sizing", ("--mode",), dict(default="accuracy", help="accuracy or performance (default: accuracy)")),
    ("sizing", ("--user-conf",), dict(type=Path, default=None, help="user.conf (default: the package's "
                                      "mlharness/user_conf/<model>.conf or mlharness/user_conf/default.conf)")),
    ("sizing", ("--audit-config",), dict(type=Path, default=None, help="compliance audit config (TEST01, TEST04)")),
    ("sizing", ("--min-duration-ms",), dict(type=int, default=None, help="shortest LoadGen test, in ms (not "
                                            "submittable below the rules' 600000)")),
    ("sizing", ("--min-query-count",), dict(type=int, default=None, help="fewest queries LoadGen issues")),
    ("sizing", ("--max-query-count",), dict(type=int, default=None, help="most queries LoadGen issues (not "
                                            "submittable)")),
    ("sizing", ("--target-qps",), dict(type=float, default=None, help="Offline expected / Server target QPS")),
    ("sizing", ("--target-latency-ms",), dict(type=float, default=None, help="SingleStream/MultiStream expected or "
                                              "Server target latency")),
    ("sizing", ("--samples-per-query",), dict(type=int, default=None, help="MultiStream samples per query")),
    ("sizing", ("--performance-sample-count",), dict(type=int, default=None, help="samples loaded for a "
                                                     "performance run")),
    ("sizing", ("--no-calibrate",), dict(action="store_true", help="performance mode: do not measure the expected "
                                         "performance (target_qps / target_latency) when neither a --user-conf nor "
                                         "a flag gives it")),
    ("sizing", ("--no-second-try",), dict(action="store_true", help="performance mode: when the rate "
                                          "mlharness calibrated proves wrong (Server: INVALID for its latency; "
                                          "Offline: outrun, short of min_duration), do not play the test once more "
                                          "at the rate the explanation names")),
    ("execution", ("--max-batchsize",), dict(type=int, default=None, help="override the manifest's batch size")),
    ("execution", ("--server-max-wait-ms",), dict(type=float, default=None, help="Server dynamic batching wait")),
    ("execution", ("--threads",), dict(type=int, default=None, help="framework intra-op threads")),
    ("execution", ("--workers",), dict(type=int, default=1, help="SUT worker threads (at least one per instance)")),
    ("execution", ("--instances",), dict(type=int, default=1, help="predictor sessions run side by side")),
    ("execution", ("--threads-per-instance",), dict(type=int, default=None, help="framework threads of each "
                                                    "instance (default: the cores split evenly)")),
    ("execution", ("--pin-cores",), dict(action="store_true", help="pin each instance (its framework threads and "
                                         "its runner thread) to its own share of the usable cores")),
    ("execution", ("--load-workers",), dict(type=int, default=None, help="threads pre-processing samples at load "
                                            "time; 0 = one per core (default: the dataset manifest's load_workers, "
                                            "else 1)")),
    ("execution", ("--trace",), dict(default="none", help="none (default), model (spans per batch/sample), "
                                     "framework (+ the framework profiler), system (+ host/GPU counters), full (+ "
                                     "LoadGen's trace); written to mlharness_trace.json")),
    ("execution", ("--telemetry-interval-ms",), dict(type=float, default=500.0, help="sample CPU, memory and GPUs "
                                                     "(NVML) this often during the run (default 500; 0 disables); "
                                                     "summaries go to mlharness_run.json")),
    ("execution", ("--ignore-framework-version",), dict(action="store_true", help="run with a framework version "
                                                        "the manifest does not name")),
    ("output", ("--output",), dict(type=Path, default=None, help="run directory (default: results/<system>/"
                                   "<benchmark>/<scenario>/accuracy or .../performance/run_1)")),
    ("output", ("--results-root",), dict(type=Path, default=Path("results"), help="root of the results tree "
                                         "(default: results); its evaluation database gets the run's row as the "
                                         "run commits, when the run folder lies in it")),
    ("output", ("--system",), dict(default=os.environ.get("MLHARNESS_SYSTEM", "default"), help="system name in "
                                   "the results tree")),
    ("output", ("--no-progress",), dict(action="store_true", help="no progress bar (the estimate line only)")),
    ("remote", ("--endpoint",), dict(action="append", default=[], metavar="URL", help="generate with this "
                                     "OpenAI-compatible server (vLLM serve, SGLang, TGI, llama.cpp, ...; framework "
                                     "'openai'); repeatable")),
    ("remote", ("--agent",), dict(action="append", default=[], metavar="HOST:PORT", help="run the model on this "
                                  "agent (`mlharness agent serve`, or any KServe v2 gRPC server); repeatable")),
    ("remote", ("--network",), dict(default=None, choices=("lon",), help="lon: LoadGen over the network; the "
                                    "agents (started with --hooks agent) run the hooks and the model, this node "
                                    "only dispatches queries")),
    ("remote", ("--sut-server",), dict(action="append", default=[], metavar="HOST:PORT", help="with --network "
                                       "lon: an agent of the network SUT; repeatable")),
]
GROUPS = {
    "model": "model and manifest",
    "dataset": "dataset",
    "sizing": "scenario and sizing (development overrides of the rules' values make a run non-submittable)",
    "execution": "execution",
    "output": "output",
    "remote": "remote model: OpenAI-compatible endpoints, agents (Open Inference Protocol over gRPC)",
}
ALL = tuple(GROUPS)
FLAG_NAMES = tuple(flags[0] for _, flags, _ in _FLAGS)
MANIFEST_HELP = "model manifest: a path or a built-in name (default: %(default)s)"  # a command's own default


def manifest_default(name: str) -> dict[str, Any]:
    """The override of ``--manifest`` for a command with a default manifest of its own."""
    return {"default": name, "help": MANIFEST_HELP}


def add_run_options(p: argparse.ArgumentParser, groups: tuple[str, ...] = ALL, *, only: tuple[str, ...] = (),
                    skip: tuple[str, ...] = (), override: dict[str, dict[str, Any]] | None = None,
                    connect: bool | None = None) -> dict[str, argparse._ArgumentGroup]:
    """Add the shared flags of ``groups`` (or just the flags named in ``only``, less those in ``skip``) to ``p``,
    in titled groups. ``override`` changes a flag's keyword arguments for this command (a command whose
    ``--scenario`` has a default, say): the name and meaning stay. ``connect``: the agents' connection flags
    (--token, --tls-*) with the remote group (default: when --agent is added). Returns the groups, so a
    command can add its own flags beside them."""
    override = override or {}
    made: dict[str, argparse._ArgumentGroup] = {}
    for group, flags, kwargs in _FLAGS:
        wanted = flags[0] in only if only else group in groups
        if not wanted or flags[0] in skip:
            continue
        if group not in made:
            made[group] = p.add_argument_group(GROUPS[group])
        made[group].add_argument(*flags, **{**kwargs, **override.get(flags[0], {})})
        if flags[0] == "--agent" and connect is not False:
            from mlharness.agent.cli import add_connect_args

            add_connect_args(made[group])
    return made


class _Deprecated(argparse.Action):
    """An old spelling: stores into the new flag's destination (converted), saying the new name once."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", convert: Any = None, **kwargs: Any):
        self.new, self.convert = new, convert
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: str | None = None):
        value = self.convert(values) if self.convert else values
        print(f"warning: {option_string} is deprecated: use {self.new} (the same on every command that runs "
              f"LoadGen); read as {self.new} {value}", file=sys.stderr)
        setattr(namespace, self.dest, value)


def deprecated_alias(p: Any, old: str, new: str, kind: Any = str, convert: Any = None) -> None:
    """``old`` still works as ``new`` (its value read with ``kind``, then ``convert``ed to ``new``'s unit)."""
    p.add_argument(old, dest=new.lstrip("-").replace("-", "_"), type=kind, action=_Deprecated, new=new,
                   convert=convert, default=argparse.SUPPRESS, help=f"deprecated: use {new}")


def seconds_to_ms(seconds: float) -> int:
    """``--seconds S`` as ``--min-duration-ms`` (a value out of range refused as the old flag's, exit 2)."""
    from mlharness.loadgen.bounds import check_flag

    check_flag("--seconds", seconds)
    return max(1, round(seconds * 1000))


def manifest_of(args: argparse.Namespace) -> str:
    """The manifest the flags name; without one, the demo, or with ``--endpoint`` a generative model (the demo's
    responses are not token streams, which is what an OpenAI-compatible server returns)."""
    from mlharness.run.options import DEFAULT_MANIFEST

    if getattr(args, "manifest", None):
        return args.manifest
    return ENDPOINT_MANIFEST if getattr(args, "endpoint", None) else DEFAULT_MANIFEST


def overrides_of(args: argparse.Namespace, **fixed: Any) -> Any:
    """The development overrides the flags give, ``fixed`` (the command's own) over them."""
    from mlharness.loadgen import settings as lgs

    names = ("min_duration_ms", "min_query_count", "max_query_count", "target_qps", "target_latency_ms",
             "samples_per_query", "performance_sample_count")
    return lgs.Overrides(**{**{n: getattr(args, n, None) for n in names}, **fixed})


def run_options(args: argparse.Namespace, **fixed: Any) -> Any:
    """The :class:`RunOptions` the shared flags in ``args`` ask for (a flag the command lacks: the default),
    with ``fixed`` (the command's own choices) over them."""
    from mlharness.run.options import RunOptions

    kw: dict[str, Any] = {"manifest": manifest_of(args), "endpoints": list(getattr(args, "endpoint", None) or [])}
    same = ("scenario", "mode", "framework", "dataset", "dataset_path", "output", "results_root", "system",
            "user_conf", "audit_config", "count", "max_batchsize", "server_max_wait_ms", "threads", "workers",
            "instances", "threads_per_instance", "pin_cores", "load_workers", "device", "trace",
            "telemetry_interval_ms", "ignore_framework_version", "round", "network")
    for name in same:
        if getattr(args, name, None) is not None:
            kw[name] = getattr(args, name)
    if hasattr(args, "no_calibrate"):
        kw["calibrate"] = not args.no_calibrate
    if hasattr(args, "no_second_try"):
        kw["second_try"] = not args.no_second_try
    if hasattr(args, "agent"):
        from mlharness.agent.cli import connect_options

        kw["agents"] = [*args.agent, *getattr(args, "sut_server", [])]
        kw["agent_options"] = connect_options(args)
    kw["overrides"] = overrides_of(args)
    kw.update(fixed)
    return RunOptions(**kw)
