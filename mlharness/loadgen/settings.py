"""TestSettings assembly with loud validation.

LoadGen silently ignores a model or scenario name it does not know and any unknown key; it also refuses a
second ``FromConfig(..., conf_type=1)`` in the same process ("Multiple conf files are used"). This module
reads the mlperf.conf compiled into the installed LoadGen (so the names checked are the ones that LoadGen will
use), checks user.conf lines before LoadGen sees them, and loads the configuration as embedded conf
(``conf_type=0``) followed by the user conf (``conf_type=2``), which never trips the multiple-conf error.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import SettingsError, suggest
from mlharness.fileguard import read_text_bounded
from mlharness.loadgen.bounds import conf_value_problem
from mlharness.manifest.schema import SCENARIOS
from mlharness.paths import USER_CONF_DIR
from mlharness.rounds import DEFAULT_ROUND, MIN_DURATION_MS, NO_MIN_DURATION, get_round

# Keys LoadGen's TestSettings::FromConfig reads (loadgen/test_settings_internal.cc, 6.0.x). Checked against the
# installed LoadGen by tests/test_settings.py: 6.0.17 reads none of 'test05', 'target_duration' and
# 'server_num_issue_query_threads' from a user.conf (or an audit.config), so they are not listed.
LOADGEN_CONF_KEYS = frozenset(
    {
        "qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed",
        "accuracy_log_rng_seed", "accuracy_log_probability", "accuracy_log_sampling_target",
        "test05_qsl_rng_seed", "test05_sample_index_rng_seed", "test05_schedule_rng_seed",
        "sample_concatenate_permutation", "min_duration", "max_duration",
        "min_query_count", "max_query_count", "mode",
        "performance_issue_unique", "performance_issue_same", "performance_issue_same_index",
        "performance_sample_count_override", "accuracy_sample_count_override",
        "target_latency", "target_latency_percentile", "target_qps", "samples_per_query",
        "max_async_queries", "coalesce_queries", "print_timestamps",
        "use_token_latencies", "ttft_latency", "tpot_latency", "infer_token_latencies",
        "token_latency_scaling_factor",
    }
)  # fmt: skip
# A user.conf cannot change these: LoadGen takes them from the embedded conf, mlharness the seeds from the round.
SEED_KEYS = frozenset(
    {"qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed", "test05_qsl_rng_seed",
     "test05_sample_index_rng_seed", "test05_schedule_rng_seed", "accuracy_log_probability"}
)  # fmt: skip
# Model names may contain dots (wan-2.2-t2v-a14b): scenario and key are the last two dotted parts.
_CONF_LINE = re.compile(r"^\s*([^\s=#]+)\.([^.\s=#]+)\.([^.\s=#]+)\s*=\s*(\S+)\s*$")
CONF_LIMIT = 1 << 20  # a user.conf or audit config is a few lines; a larger file is the wrong file


@functools.lru_cache(maxsize=1)
def embedded_mlperf_conf() -> str:
    """The mlperf.conf text compiled into the installed LoadGen extension."""
    import mlperf_loadgen

    blob = Path(mlperf_loadgen.__file__).read_bytes()
    marker = b"# The format of this config file is 'key = value'."
    start = blob.find(marker)
    if start < 0:
        raise SettingsError(f"cannot find the embedded mlperf.conf in {mlperf_loadgen.__file__}")
    end = blob.find(b"\0", start)
    return blob[start:end].decode("utf-8", errors="replace")


def parse_conf(text: str, origin: str) -> list[tuple[int, str, str, str, str]]:
    """(line number, model, scenario, key, value) for each setting line; other non-comment lines are errors."""
    out = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _CONF_LINE.match(line)
        if not m:
            raise SettingsError(f"{origin}, line {no}: expected 'model.scenario.key = value', found '{raw.strip()}'")
        out.append((no, *m.groups()))
    return out


# The round's settings of benchmarks the installed LoadGen's mlperf.conf has no lines for, because the round measures
# them with the MLCommons endpoints client rather than LoadGen: model -> scenario ("*": all) -> TestSettings
# attribute -> value, applied after mlperf.conf and before user.conf, as mlperf.conf lines would be. qwen3.6-27b
# (edge, SingleStream): the reference plays each of its 20 recorded conversations once (online_edge_full_run.yaml,
# num_trajectories_to_issue: 20), and so does a run here: sample_concatenate_permutation issues whole permutations of
# the loaded sessions, as many as min_duration needs, and min_query_count 1 asks for one. LoadGen rounds a SingleStream
# min_query_count up to the next multiple of the sessions loaded, one whole pass more when it already is one
# (test_settings_internal.cc: min_query_count += count - min_query_count % count), so 20 would play the 20
# conversations twice; 1 (or anything below 20) plays them once. LoadGen's early stopping would want 64 sessions at the
# 90th percentile, but the round's checker waives it for this benchmark's (endpoints) results, and so does
# mlharness's verdict (rounds.Round.endpoints_results): LoadGen's summary reads INVALID for that reason alone, and the
# run is VALID under the round's rules.
# e2e-rag-qna and e2e-rag-db (v6.1 pipelines): the reference carries their lines in e2e-rag/user.conf, not mlperf.conf:
# one pass over the data set (min_query_count 824 questions, 2515 pages; the checker's OFFLINE_MIN_SPQ) and
# min_duration 0 (the checker waives its 600 s for them: rounds.NO_MIN_DURATION). Its target_qps is left to
# calibration, and max_async_queries is no setting of this LoadGen's TestSettings.
ROUND_SETTINGS: dict[str, dict[str, dict[str, int]]] = {
    "qwen3.6-27b": {"*": {"sample_concatenate_permutation": 1}, "SingleStream": {"min_query_count": 1}},
    "e2e-rag-qna": {"Offline": {"min_query_count": 824, "min_duration_ms": 0}},
    "e2e-rag-db": {"Offline": {"min_query_count": 2515, "min_duration_ms": 0}},
}


@functools.lru_cache(maxsize=1)
def known_models() -> frozenset[str]:
    conf = {m for _, m, _, _, _ in parse_conf(embedded_mlperf_conf(), "mlperf.conf") if m != "*"}
    return frozenset(conf | set(ROUND_SETTINGS))


@functools.lru_cache(maxsize=1)
def embedded_seeds() -> dict[str, int]:
    return {
        k: int(v) for _, m, s, k, v in parse_conf(embedded_mlperf_conf(), "mlperf.conf")
        if m == "*" and s == "*" and k.endswith("rng_seed")
    }  # fmt: skip


# Interactive is no LoadGen scenario: a Server test under the '<model>-interactive' settings (tighter TTFT/TPOT).
INTERACTIVE = "Interactive"
RUN_SCENARIOS = (*SCENARIOS, INTERACTIVE)


def check_scenario(scenario: str, interactive: bool = False) -> str:
    """A LoadGen scenario name (and Interactive, for a run's ``--scenario``, when ``interactive``)."""
    known = RUN_SCENARIOS if interactive else SCENARIOS
    if scenario not in known:
        raise SettingsError(f"unknown scenario '{scenario}'.{suggest(scenario, known)}")
    return scenario


def loadgen_scenario(scenario: str) -> str:
    """The LoadGen scenario a run's scenario runs as (Interactive runs as Server)."""
    return "Server" if scenario == INTERACTIVE else scenario


def conf_model_for(model: str, scenario: str) -> str:
    """The mlperf.conf / user.conf model name of a run: '<model>-interactive' for Interactive."""
    return f"{model}-interactive" if scenario == INTERACTIVE else model


def check_model_name(model: str) -> None:
    base = model.removesuffix("-interactive")
    if model not in known_models() and base != model and base in known_models():
        # qwen3-vl-235b-a22b: the round measures its Interactive scenario with the endpoints client, and LoadGen's
        # mlperf.conf holds no Interactive settings for it (bound, subset) to run it by
        raise SettingsError(
            f"'{base}' has no Interactive scenario in the mlperf.conf of the installed LoadGen (no "
            f"'{model}' lines): LoadGen cannot run it with the round's settings. Run --scenario Server (with "
            f"Offline, what the round requires of a datacenter system)")
    if model not in known_models():
        raise SettingsError(
            f"MLPerf model '{model}' is not in the mlperf.conf of the installed LoadGen, which would silently run "
            f"with default settings.{suggest(model, known_models())}"
        )


def read_conf(path: Path, what: str = "user.conf") -> str:
    """The text of a user.conf or audit config: a regular UTF-8 file of at most CONF_LIMIT bytes (a FIFO or a
    device is refused by name, never waited on or read without end)."""
    prefix = f"{what} {path} "

    def error(message: str) -> SettingsError:
        return SettingsError(f"cannot read {what} {path}: {message.removeprefix(prefix)}")

    return read_text_bounded(Path(path), what, CONF_LIMIT, error=error)


def check_conf_values(path: Path, lines: list[tuple[int, str, str, str, str]]) -> None:
    """Each value is a number LoadGen parses, of the type and in the range its key needs."""
    for no, m, s, k, v in lines:
        where = f"{path}, line {no}"
        if not _is_number(v):  # LoadGen would reject the whole file (rc=-EINVAL) without naming the line
            raise SettingsError(f"{where}: the value '{v}' of '{k}' is not a number")
        problem = conf_value_problem(k, s, v)
        if problem:
            raise SettingsError(f"{where}: '{m}.{s}.{k} = {v}': {k} {problem}")


def check_audit_config(path: Path) -> None:
    """An audit config is read by LoadGen only: its lines and values, checked as a user.conf's are."""
    check_conf_values(path, parse_conf(read_conf(path, "audit config"), str(path)))


def validate_user_conf(path: Path, model: str | None) -> list[tuple[int, str, str, str, str]]:
    """Refuse what LoadGen would silently ignore or misread: foreign model names (not checked when ``model`` is
    None: before the manifest is loaded), unknown scenarios and keys, seeds, values out of range."""
    lines = parse_conf(read_conf(path), str(path))
    for no, m, s, k, v in lines:
        where = f"{path}, line {no}"
        if not _is_number(v):  # LoadGen would reject the whole file (rc=-EINVAL) without naming the line
            raise SettingsError(f"{where}: the value '{v}' of '{k}' is not a number")
        if model is not None and m not in (model, "*"):
            raise SettingsError(
                f"{where}: model '{m}' is neither this run's model '{model}' nor '*'; LoadGen would ignore the line"
            )
        if s not in SCENARIOS and s != "*":
            raise SettingsError(f"{where}: unknown scenario '{s}'.{suggest(s, SCENARIOS)}")
        if k not in LOADGEN_CONF_KEYS:
            raise SettingsError(f"{where}: '{k}' is not a LoadGen setting.{suggest(k, LOADGEN_CONF_KEYS)}")
        if k in SEED_KEYS:
            raise SettingsError(f"{where}: '{k}' is fixed by the embedded mlperf.conf and cannot be set in user.conf")
        if k == "mode":  # build_test_settings sets the mode from the run's --mode, so this line would be lost
            raise SettingsError(f"{where}: 'mode' is chosen with --mode (accuracy or performance), not in user.conf")
    check_conf_values(path, lines)
    return lines


def _is_number(value: str) -> bool:
    """LoadGen's rule, near enough: the whole value parses as strtoul(base 0) or strtod (decimal or 0x hex)."""
    if "_" in value:  # Python's float() accepts 1_000, strtod does not
        return False
    try:
        float(value)
        return True
    except ValueError:
        pass
    if value.lstrip("+-").lower().startswith("0x"):
        try:
            float.fromhex(value)
            return True
        except ValueError:
            return False
    return False


def default_user_conf(benchmark_model: str) -> Path | None:
    """``mlharness/user_conf/<model>.conf`` if it exists, else ``mlharness/user_conf/default.conf``."""
    root = USER_CONF_DIR
    for name in (f"{benchmark_model}.conf", "default.conf"):
        if (root / name).is_file():
            return root / name
    return None


@dataclass
class Overrides:
    """Development overrides from the command line; any of them makes a run non-submittable."""

    min_duration_ms: int | None = None
    min_query_count: int | None = None
    max_query_count: int | None = None
    target_qps: float | None = None
    target_latency_ms: float | None = None
    samples_per_query: int | None = None
    performance_sample_count: int | None = None

    def given(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class SettingsPlan:
    model: str  # name used for conf lookups
    official: bool
    scenario: str
    mode: str
    user_conf: Path | None
    overrides: Overrides
    audit_config: Path | None  # None: a normal run (the runner still passes LoadGen an explicit, absent path)
    not_submittable: list[str] = field(default_factory=list)
    round: str = DEFAULT_ROUND  # the MLPerf round whose seeds the run uses (mlharness.rounds)
    token_latencies: bool = False  # a token-stream model: LoadGen measures TTFT/TPOT (use_token_latencies)
    latency_bound: dict[str, Any] | None = None  # Server: the bound(s) and where they come from (server_bound.py)


def build_test_settings(plan: SettingsPlan) -> Any:
    """The LoadGen TestSettings for a plan; raises SettingsError if LoadGen rejects the configuration."""
    import mlperf_loadgen as lg

    check_scenario(plan.scenario)
    mlperf_round = get_round(plan.round)
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, plan.scenario)
    if plan.token_latencies:  # before FromConfig: LoadGen reads ttft_latency/tpot_latency only when it is on
        settings.use_token_latencies = True
    rc = settings.FromConfig("", plan.model, plan.scenario, 0)
    if rc != 0:
        raise SettingsError(f"LoadGen could not read its embedded mlperf.conf (rc={rc})")
    # the round's own conf turning token latencies off (qwen3-vl-235b-a22b) makes the benchmark's latency end to
    # end, a rule followed; a user.conf turning them off is refused below
    end_to_end = plan.token_latencies and not settings.use_token_latencies
    for scenario in ("*", plan.scenario):
        for key, value in ROUND_SETTINGS.get(plan.model, {}).get(scenario, {}).items():
            setattr(settings, key, type(getattr(settings, key))(value))
    if plan.user_conf is not None:
        validate_user_conf(plan.user_conf, plan.model)
        rc = settings.FromConfig(str(plan.user_conf), plan.model, plan.scenario, 2)
        if rc != 0:
            raise SettingsError(f"LoadGen rejected user.conf {plan.user_conf} (rc={rc})")
    if plan.audit_config is not None and Path(plan.audit_config).is_file():
        # LoadGen reads an audit config as model '*': a benchmark's own lines (TEST04's 'wan-2.2-t2v-a14b.Offline.
        # min_query_count = 20') are the SUT's to load, by its model name (compliance/TEST04/README.md)
        if settings.FromConfig(str(plan.audit_config), plan.model, plan.scenario, 2) != 0:
            raise SettingsError(f"LoadGen rejected audit config {plan.audit_config}")
    if plan.token_latencies and not settings.use_token_latencies and not end_to_end:
        raise SettingsError(f"the configuration of '{plan.model}' turns use_token_latencies off, but the model "
                            "streams tokens (response.kind: tokens)")
    settings.mode = lg.TestMode.AccuracyOnly if plan.mode == "accuracy" else lg.TestMode.PerformanceOnly
    o = plan.overrides
    if o.min_duration_ms is not None:
        settings.min_duration_ms = o.min_duration_ms
    if o.min_query_count is not None:
        settings.min_query_count = o.min_query_count
    if o.max_query_count is not None:
        settings.max_query_count = o.max_query_count
    if o.performance_sample_count is not None:
        settings.performance_sample_count_override = o.performance_sample_count
    if o.target_qps is not None:
        if plan.scenario == "Offline":
            settings.offline_expected_qps = o.target_qps
        elif plan.scenario == "Server":
            settings.server_target_qps = o.target_qps
        else:
            raise SettingsError(f"--target-qps applies to Offline and Server, not {plan.scenario}")
    if o.target_latency_ms is not None:
        ns = int(o.target_latency_ms * 1e6)
        {
            "SingleStream": lambda: setattr(settings, "single_stream_expected_latency_ns", ns),
            "MultiStream": lambda: setattr(settings, "multi_stream_expected_latency_ns", ns),
            "Server": lambda: setattr(settings, "server_target_latency_ns", ns),
            "Offline": lambda: (_ for _ in ()).throw(SettingsError("--target-latency-ms does not apply to Offline")),
        }[plan.scenario]()
    if o.samples_per_query is not None:
        if plan.scenario != "MultiStream":
            raise SettingsError("--samples-per-query applies to MultiStream only")
        settings.multi_stream_samples_per_query = o.samples_per_query
    # the round's seeds, set explicitly: the embedded mlperf.conf carries one round's only (user.conf cannot set them)
    for key, value in mlperf_round.seeds.items():
        setattr(settings, key, value)
    if plan.mode == "performance" and settings.min_duration_ms < MIN_DURATION_MS and plan.model not in NO_MIN_DURATION:
        plan.not_submittable.append(f"min_duration is {settings.min_duration_ms} ms: the official checker rejects "
                                    f"runs shorter than {MIN_DURATION_MS} ms in every division, open included")
    if _audit_requests_test05(plan):
        settings.test05 = True  # LoadGen 6.0.x ignores 'test05' in an audit config: apply TEST05's seeds here
        for key, value in (mlperf_round.test05_seeds or {}).items():
            setattr(settings, f"test05_{key}", value)
    return settings


def _audit_requests_test05(plan: SettingsPlan) -> bool:
    """True when the audit config (TEST05's) has a '*.<scenario>.test05 = 1' line for this run."""
    if plan.audit_config is None or not Path(plan.audit_config).is_file():
        return False
    lines = parse_conf(read_conf(Path(plan.audit_config), "audit config"), str(plan.audit_config))
    return any(k == "test05" and m in ("*", plan.model) and s in ("*", plan.scenario) and float(v) != 0
               for _, m, s, k, v in lines)


def describe_settings(settings: Any) -> dict[str, Any]:
    """The requested TestSettings as plain values, for the run metadata."""
    out: dict[str, Any] = {}
    for name in dir(settings):
        if name.startswith("_") or name == "FromConfig":
            continue
        value = getattr(settings, name)
        if isinstance(value, bool | int | float | str):
            out[name] = value
        else:
            out[name] = str(value).rsplit(".", 1)[-1]
    return out


# user.conf key for each development override of `mlharness run`
OVERRIDE_CONF_KEYS = {
    "min_duration_ms": "min_duration", "min_query_count": "min_query_count", "max_query_count": "max_query_count",
    "target_qps": "target_qps", "target_latency_ms": "target_latency", "samples_per_query": "samples_per_query",
    "performance_sample_count": "performance_sample_count_override",
}  # fmt: skip


def effective_user_conf(base: Path | None, conf_model: str, scenario: str, overrides: dict[str, Any]) -> str:
    """The user.conf the scenario's runs used: the file itself, then the command line's development overrides
    written as the conf lines that would set them."""
    text = read_conf(base) if base is not None else "# no user.conf: LoadGen's embedded mlperf.conf defaults\n"
    if not text.endswith("\n"):
        text += "\n"
    lines = []
    # Interactive: LoadGen reads the Server keys of the -interactive model name (llama3_1-8b-interactive.Server.*)
    conf_model, lg_scenario = conf_model_for(conf_model, scenario), loadgen_scenario(scenario)
    for key, value in overrides.items():
        conf_key = OVERRIDE_CONF_KEYS.get(key)
        if conf_key is None or value is None:
            continue
        if key == "target_qps" and lg_scenario not in ("Offline", "Server"):
            continue
        if key == "target_latency_ms" and scenario == "Offline":
            continue
        if key == "samples_per_query" and scenario != "MultiStream":
            continue
        lines.append(f"{conf_model}.{lg_scenario}.{conf_key} = {value:g}" if isinstance(value, float)
                     else f"{conf_model}.{lg_scenario}.{conf_key} = {value}")
    if lines:
        text += ("\n# Development overrides given on the command line (they make the results non-submittable "
                 "in the closed division):\n" + "\n".join(lines) + "\n")
    return text
