"""Replaying a scenario recorded from vLLM 0.30.0's real scheduler through servesim's command line.

A recorded scenario (tests/data/spec_oracle/, tests/data/async_oracle/) holds the oracle's
`config` (vLLM's knob names), the `workload` (id, arrival_time in s, prompt_len, output_len, and
optionally prompt_token_ids) and what vLLM decided at every step (`oracle_steps`). servesim runs
it on the linear clock the oracle ran on, with the same pool of usable blocks, and its step log
is compared field by field: the tokens scheduled per request in vLLM's order, who was preempted
and finished, the free blocks after the step, the prompt tokens each admitted request found
cached (prefix caching on), and the drafts verified and accepted (speculative decoding).
"""

import json
from pathlib import Path

from conftest import servesim_here

STEP_BASE_S, STEP_PER_TOKEN_S = 2.0 ** -8, 2.0 ** -15  # the oracle's clock (powers of two: exact)
SAMPLED_TOKEN_ID = 7  # every token the oracle's fake model samples (and every draft it proposes)


def write_trace(workload: list[dict], directory: Path) -> Path:
    """A CSV trace when no request carries token ids, else Mooncake-style JSON lines with them
    (and the outputs the fake model samples, so that conversation turns find them cached)."""
    if not any("prompt_token_ids" in request for request in workload):
        path = directory / "trace.csv"
        rows = ["id,arrival_s,prompt_len,output_len"] + [
            f"{r['id']},{float(r['arrival_time'])!r},{r['prompt_len']},{r['output_len']}"
            for r in workload]
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
        return path
    path = directory / "trace.jsonl"
    with path.open("w", encoding="utf-8") as file:
        for r in workload:
            row = {"id": r["id"], "timestamp": float(r["arrival_time"]) * 1000,
                   "input_length": r["prompt_len"], "output_length": r["output_len"],
                   "prompt_token_ids": r["prompt_token_ids"],
                   "output_token_ids": [SAMPLED_TOKEN_ID] * r["output_len"]}
            file.write(json.dumps(row) + "\n")
    return path


def speculative_flags(config: dict) -> list[str]:
    """How the recorder told servesim the same speculation and acceptance (config["servesim"])."""
    flags = config.get("servesim") or {}
    argv = []
    if flags.get("speculative_config"):
        argv += ["--speculative-config", json.dumps(flags["speculative_config"])]
    if flags.get("spec_acceptance_rate") is not None:
        argv += ["--spec-acceptance-rate", repr(float(flags["spec_acceptance_rate"]))]
    return argv


def engine_flags(config: dict, max_model_len: int) -> list[str]:
    """The recorded scheduler's config as servesim's flags, on the linear clock the recorder
    priced its steps with."""
    per_token_ms = repr(STEP_PER_TOKEN_S * 1000)
    return [
        "--mode", "chunked" if config["enable_chunked_prefill"] else "continuous",
        "--forward-model", "linear", "--linear-step-ms", repr(STEP_BASE_S * 1000),
        "--linear-prefill-token-ms", per_token_ms, "--linear-decode-token-ms", per_token_ms,
        "--block-size", str(config["block_size"]),
        "--num-gpu-blocks-override", str(config["num_gpu_blocks"]),
        "--max-num-seqs", str(config["max_num_seqs"]),
        "--max-num-batched-tokens", str(config["max_num_batched_tokens"]),
        "--long-prefill-token-threshold", str(config["long_prefill_token_threshold"]),
        "--max-model-len", str(max_model_len)]


def servesim_argv(scenario: dict, trace: Path, log: Path, async_scheduling: bool) -> list[str]:
    config = scenario["config"]
    return [
        "run", "--trace", str(trace), "--step-log", str(log), "--format", "json",
        *engine_flags(config, config["max_model_len"]),
        "--enable-prefix-caching" if config.get("enable_prefix_caching")
        else "--no-enable-prefix-caching",
        "--async-scheduling" if async_scheduling else "--no-async-scheduling",
        *speculative_flags(config)]


def run_servesim(capsys, scenario: dict, tmp_path: Path, async_scheduling: bool):
    """(exit status, stderr, step-log lines) of servesim on the recorded scenario."""
    trace, log = write_trace(scenario["workload"], tmp_path), tmp_path / "steps.jsonl"
    code, _, err = servesim_here(capsys, *servesim_argv(scenario, trace, log, async_scheduling))
    steps = [json.loads(line) for line in log.read_text().splitlines()] if code == 0 else []
    return code, err, steps


def differences(ours: list[dict], scenario: dict, recorded: str = "oracle_steps") -> list[str]:
    """Every step where servesim's step log and vLLM's record (`scenario[recorded]`) differ, as
    `step i: field`; empty when they agree at every step (and have as many steps)."""
    theirs = scenario[recorded]
    caching = bool(scenario["config"].get("enable_prefix_caching"))
    found = [] if len(ours) == len(theirs) else [f"{len(ours)} steps, vLLM {len(theirs)}"]
    for index, (step, oracle) in enumerate(zip(ours, theirs)):
        fields = {
            "scheduled": ([list(item) for item in step["scheduled"].items()],
                          oracle["scheduled"]),
            "preempted": (step["preempted"], oracle["preempted"]),
            "finished": (sorted(step["finished"]), sorted(oracle["finished"])),
            "free_blocks": (step["num_free_blocks"], oracle["free_blocks"])}
        if caching:
            fields["hits"] = (step.get("cached_tokens", {}), oracle["hits"])
        if "spec" in oracle:
            fields["drafts"] = (step.get("drafts", {}), oracle["spec"])
        found += [f"step {index}: {name} {a} != vLLM {b}" for name, (a, b) in fields.items()
                  if a != b]
    return found


def scenarios(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json"))
