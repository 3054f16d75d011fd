"""`diagnose --observed FILE`: what a real deployment measured, held against the simulation.

FILE is the JSON object `vllm bench serve --save-result` writes. diagnose reads from it what was
sent (`request_rate`, "inf" when all at once; `burstiness`; `max_concurrency`, null for no
limit; `num_prompts`) to send the simulation the same, and what was measured (the latencies and
throughputs below, under the same names servesim's JSON uses) to compare.

Two figures agree when they are within AGREEMENT_BAND of each other: |ln(observed /
simulated)| <= 0.40, about 1.5x either way, the worst error of the clock against published
measurements (`calibration`). Outside it, which figures disagree points to where: slower decode
steps than simulated are the host or the model's preset, not the scheduler; a longer time to
first token with decode steps as simulated is work before the engine (HTTP, tokenization).
"""

import json
import math
from typing import Optional

from commands.user_input import MAX_FILE_BYTES, JsonRefused, parse_json, read_text_file
from config import ConfigError
from presets import GPUS, GpuSpec

AGREEMENT_BAND = 0.40  # |ln(observed / simulated)|: calibration's worst row is 0.26-0.40
COMPARED = ("request_throughput", "output_throughput",
            "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
            "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
            "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")
DECODE = ("mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
          "p99_itl_ms")
FIRST_TOKEN = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms")
THROUGHPUT = ("request_throughput", "output_throughput")
# What was sent: the key in FILE -> the workload flag it sets.
SENT = {"request_rate": "--request-rate", "burstiness": "--burstiness",
        "max_concurrency": "--max-concurrency", "num_prompts": "--num-prompts"}
NOT_FOR_TRACES = ("request_rate", "burstiness")  # a trace brings its own arrival times
# The upstream skill's refusal: an H100-class GPU serving under this is slow outside vLLM.
MIN_OBSERVED_OUTPUT_TOK_S = 100


def read_observed(path: str) -> dict:
    """FILE's figures, every one checked: one ConfigError line naming what is wrong."""
    where = f"--observed {path}"
    text = read_text_file(where, path, ConfigError)
    try:
        values = parse_json(text, max_chars=MAX_FILE_BYTES)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{where} is not JSON ({error.msg}, line {error.lineno}); give the file "
                          "`vllm bench serve --save-result` wrote") from None
    except JsonRefused as error:  # NaN, Infinity, 1e999, nested too deep: vLLM writes none
        raise ConfigError(f"{where}: {error}; give the file `vllm bench serve --save-result` "
                          "wrote") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must hold one JSON object, as `vllm bench serve "
                          "--save-result` writes it")
    observed = {key: _number(where, key, values[key]) for key in COMPARED if key in values}
    if not observed:
        raise ConfigError(f"{where} holds none of the figures diagnose compares ("
                          f"{', '.join(COMPARED[:4])}, ...)")
    observed.update(_sent(where, values))
    return observed


def _number(where: str, key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{where}: {key} must be a number >= 0, got {value!r}")
    return float(value)


def _sent(where: str, values: dict) -> dict:
    """What the benchmark sent, checked: the keys present, with vLLM's spellings."""
    sent = {}
    rate = values.get("request_rate")
    if rate is not None:
        if rate == "inf":
            sent["request_rate"] = math.inf
        elif isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
            raise ConfigError(f'{where}: request_rate must be a number > 0 or "inf", got {rate!r}')
        else:
            sent["request_rate"] = float(rate)
    burstiness = values.get("burstiness")
    if burstiness is not None:
        if isinstance(burstiness, bool) or not isinstance(burstiness, (int, float)) or not (
                burstiness > 0):
            raise ConfigError(f"{where}: burstiness must be a number > 0, got {burstiness!r}")
        sent["burstiness"] = float(burstiness)
    if "max_concurrency" in values and values["max_concurrency"] is None:
        sent["max_concurrency"] = None  # vLLM's "no limit": an open loop
    for key in ("max_concurrency", "num_prompts"):
        value = values.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}: {key} must be a positive integer"
                              f"{' or null' if key == 'max_concurrency' else ''}, got {value!r}")
        sent[key] = value
    return sent


def send_as_observed(observed: dict, args, is_trace: bool) -> list[str]:
    """Set the workload flags from what FILE says was sent, where they apply and were not
    given; refuse a flag given otherwise. Returns the flags set, as typed."""
    applied = []
    for key, flag in SENT.items():
        if key not in observed or (is_trace and key in NOT_FOR_TRACES):
            continue
        dest = flag[2:].replace("-", "_")
        value, given = observed[key], getattr(args, dest)
        if value is None:  # no limit on concurrency
            if given is not None:
                raise ConfigError(f"{flag} {given} and --observed's {key} null (no limit) "
                                  f"disagree: the simulation must be sent what the deployment "
                                  f"was; leave out {flag}")
            continue
        if given is None:
            setattr(args, dest, value)
            applied.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
        elif given != value:
            raise ConfigError(f"{flag} {given} and --observed's {key} {value:g} disagree: the "
                              f"simulation must be sent what the deployment was; leave out {flag}")
    return applied


def is_h100_class(gpu: GpuSpec) -> bool:
    """An H100 or a GPU with at least its FP8 compute (H200, B200, MI300X)."""
    return gpu.fp8_tflops is not None and gpu.fp8_tflops >= GPUS["h100-sxm5"].fp8_tflops


def refuse_slow_deployment(observed: dict, simulated: dict, gpu: GpuSpec) -> None:
    """The upstream skill's rule, kept where it is honest: an H100-class deployment measured
    under 100 output tok/s, where the simulation of the same traffic serves more, is slowed
    outside the engine; tuning the scheduler would not find it."""
    measured = observed.get("output_throughput")
    if measured is None or not is_h100_class(gpu):
        return
    if measured < MIN_OBSERVED_OUTPUT_TOK_S <= simulated["output_throughput"]:
        raise ConfigError(
            f"--observed: {measured:g} output tok/s on an H100-class GPU, where servesim serves "
            f"the same traffic at {simulated['output_throughput']:,.0f}: look outside vLLM first "
            "(client-side tokenization, request serialization, the benchmark client itself) "
            "before tuning the scheduler")


def compare(observed: dict, simulated: Optional[dict], decode_floor_ms: float) -> dict:
    """Each figure FILE holds beside the simulation's, whether they agree, and where the
    disagreements point. `simulated` None: the config could not start, nothing to compare."""
    if simulated is None:
        return {"figures": [], "matches": False, "first_token_sooner": False,
                "notes": ["the simulated config could not start (see the bottleneck): there is "
                          "nothing to compare the deployment with"]}
    figures = []
    for key in COMPARED:
        if key in observed and simulated.get(key, 0) > 0 and observed[key] > 0:
            ratio = observed[key] / simulated[key]
            figures.append({"metric": key, "observed": observed[key],
                            "simulated": simulated[key], "ratio": ratio,
                            "agrees": abs(math.log(ratio)) <= AGREEMENT_BAND})
    sooner = any(f["metric"] in FIRST_TOKEN and not f["agrees"] and f["ratio"] < 1
                 for f in figures)
    return {"figures": figures, "matches": bool(figures) and all(f["agrees"] for f in figures),
            "notes": _where_it_points(figures, decode_floor_ms), "first_token_sooner": sooner}


def _where_it_points(figures: list[dict], decode_floor_ms: float) -> list[str]:
    def off(keys, higher: bool) -> list[dict]:
        return [f for f in figures if f["metric"] in keys and not f["agrees"]
                and (f["ratio"] > 1) == higher]

    notes = []
    slow, fast = off(DECODE, True), off(DECODE, False)
    if slow:
        worst = max(slow, key=lambda f: f["ratio"])
        notes.append(
            f"decode is slower than simulated ({worst['metric']} {worst['observed']:,.1f} vs "
            f"{worst['simulated']:,.1f} ms, {worst['ratio']:.1f}x; the decode floor on this preset "
            f"is {decode_floor_ms:.1f} ms): that points outside the scheduler, to host overhead "
            "per step (CPU scheduling, detokenization), another engine version, or a --model / "
            "--gpu preset other than the deployment's")
    if fast:
        notes.append("decode is faster than simulated: a GPU or quantization faster than the "
                     "preset, or speculation the simulation was not given")
    if off(FIRST_TOKEN, True) and not slow:
        notes.append("the first token comes later than simulated while decode agrees: work "
                     "before the engine (HTTP, tokenization, a queue in the client or a load "
                     "balancer), or longer prompts than the workload flags say")
    if off(FIRST_TOKEN, False):
        notes.append("the first token comes sooner than simulated: prefix-cache hits the "
                     "simulated workload has not (most often a server whose prefix cache was "
                     "warm: vllm bench serve sends the same prompts on every run, while the "
                     "simulation starts cold), or shorter prompts than it says")
    if off(THROUGHPUT, False) and not slow:
        notes.append("less is served per second than simulated: the benchmark sent less "
                     "(another rate, concurrency or number of prompts) or the client limited it")
    if off(THROUGHPUT, True) and not fast:
        notes.append("more is served per second than simulated: the benchmark sent more (a "
                     "higher rate, more clients, shorter requests) than the workload flags say")
    disagreeing = [f["metric"] for f in figures if not f["agrees"]]
    if disagreeing and not notes:
        notes.append(f"{', '.join(disagreeing)} disagree with the simulation beyond the band: "
                     "check that the workload flags describe the traffic the benchmark sent")
    if not notes and figures:
        notes.append(f"every figure agrees within the band (|ln ratio| <= {AGREEMENT_BAND:g}, "
                     "about 1.5x either way): the simulation describes this deployment")
    return notes


def observed_meets_slo(observed: dict, slos_ms: dict[str, float],
                       attainment_pct: float) -> Optional[bool]:
    """Did the deployment as measured meet the SLO (attainment_pct of the requests within
    every target)? From its request_goodput where the benchmark was given --goodput; else
    bracketed by percentiles: a P99 within a target is met, a median above it is missed.
    None: the file cannot tell."""
    if all(key in observed for key in ("request_goodput", "duration", "completed")):
        good = observed["request_goodput"] * observed["duration"]
        return 100 * good >= attainment_pct * observed["completed"]
    verdicts = []
    for name, target in slos_ms.items():
        p99, median = observed.get(f"p99_{name}_ms"), observed.get(f"median_{name}_ms")
        if p99 is not None and p99 <= target:
            verdicts.append(True)
        elif median is not None and median > target:
            verdicts.append(False)
        else:
            verdicts.append(None)
    if False in verdicts:
        return False
    return True if verdicts and all(verdicts) else None
