"""Speculative decoding end to end: acceptance against its closed form, what the clock charges,
the memory a drafter takes, the metrics vLLM reports, and the command line's refusals."""

import json
import math
from dataclasses import replace

import pytest

from batch import SchedulerOutput
from config import EngineConfig
from conftest import make_request, make_workload, servesim, servesim_here
from forward_model import make_clock
from gpu_memory import plan_memory
from main import simulate
from modes import MODES
from presets import MODELS
from commands.speculative_flag import parse_speculative_config
from workload import random_workload

EAGLE3 = ('{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
          '"num_speculative_tokens": 3}')
DRAFT_MODEL = '{"model": "llama-3.2-1b", "num_speculative_tokens": 3}'
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'


def serve(config, rows, mode="chunked", max_concurrency=None):
    plan = plan_memory(config)
    return simulate(make_workload(rows, max_concurrency), MODES[mode], config,
                    plan.num_gpu_blocks, make_clock(config))


def accepted_distribution(rate, k):
    """P(j accepted of k) when each draft is accepted with `rate` given those before it."""
    return [rate ** j * (1 - rate) for j in range(k)] + [rate ** k]


def test_mean_acceptance_length_matches_the_closed_form_within_sampling_error():
    rate, k = 0.6, 3
    config = EngineConfig(speculative_config=replace(parse_speculative_config(NGRAM),
                                                     acceptance_rate=rate))
    summary = serve(config, [(0.0, 100, 2000)] * 8).summary()
    closed_form = (1 - rate ** (k + 1)) / (1 - rate)            # tokens per verifying step
    p = accepted_distribution(rate, k)
    mean = sum(j * pj for j, pj in enumerate(p))
    assert 1 + mean == pytest.approx(closed_form)               # the two forms agree
    std_error = math.sqrt(sum((j - mean) ** 2 * pj for j, pj in enumerate(p))
                          / summary["spec_decode_num_drafts"])
    assert abs(summary["spec_decode_mean_acceptance_length"] - closed_form) < 4 * std_error
    assert summary["spec_decode_num_drafts"] > 5000              # enough draws to mean it
    for position, share in enumerate(summary["spec_decode_per_position_acceptance_rates"]):
        assert share == pytest.approx(rate ** (position + 1), abs=0.03)


def test_same_seed_same_draws_and_another_seed_other_draws():
    config = EngineConfig(speculative_config=parse_speculative_config(EAGLE3))
    runs = []
    for seed in (0, 0, 1):
        plan = plan_memory(config)
        workload = random_workload(200, 300, 0.0, num_prompts=6, seed=seed)
        runs.append(simulate(workload, MODES["chunked"], config, plan.num_gpu_blocks,
                             make_clock(config)).summary())
    assert runs[0] == runs[1]
    assert runs[0]["spec_decode_num_accepted_tokens"] != runs[2]["spec_decode_num_accepted_tokens"]


def test_tokens_out_together_are_one_gap_apart_as_a_streaming_client_sees_them():
    # Every draft accepted, 13 outputs: the first token, then 3 steps of 1 + 3 tokens.
    keys = json.loads(NGRAM) | {"rejection_sample_method": "synthetic",
                                "synthetic_acceptance_rates": [1, 1, 1]}
    config = EngineConfig(speculative_config=parse_speculative_config(json.dumps(keys)))
    recorder = serve(config, [(0.0, 100, 13)])
    record = recorder.record(0)
    assert record.num_output_tokens == 13 and recorder.num_steps == 4
    assert recorder.itl_gaps.num_tokens == 3                     # one gap per step
    summary = recorder.summary()
    assert summary["mean_tpot_ms"] == pytest.approx(
        1000 * (record.last_token_s - record.first_token_s) / 12)  # TPOT counts tokens
    assert (summary["spec_decode_num_drafts"], summary["spec_decode_num_draft_tokens"],
            summary["spec_decode_num_accepted_tokens"]) == (3, 9, 9)
    assert summary["spec_decode_mean_acceptance_length"] == 4.0


def test_without_speculation_no_speculative_field_appears():
    summary = serve(EngineConfig(), [(0.0, 100, 10)]).summary()
    assert not [key for key in summary if key.startswith("spec_decode")]


def test_the_proposer_runs_once_over_the_step_then_k_minus_1_times_over_its_requests():
    batch = SchedulerOutput()
    batch.add(make_request("a", 100), 4, 100, num_draft_tokens=3)   # a decode verifying 3
    batch.add(make_request("b", 900), 500, 0)                       # a prompt chunk
    calls = []

    def price(num_tokens, num_seqs, num_pairs, num_context_tokens):
        calls.append((num_tokens, num_seqs, num_pairs, num_context_tokens))
        return 1.0

    eagle = parse_speculative_config(EAGLE3)
    assert eagle.drafting_time_s(batch, price) == 1.0 + 2 * 1.0  # first pass + (k - 1) more
    pairs = 4 * 100 + 10 + 500 * 501 // 2
    # the first over the step's 504 tokens; the others one token for each of the 2 requests,
    # after the 100 + 504 tokens now cached
    assert calls == [(504, 2, pairs, 100), (2, 2, 606, 604)]
    calls.clear()
    draft = parse_speculative_config(DRAFT_MODEL)
    draft.drafting_time_s(batch, price)
    assert calls[0][0] == 504 + 2  # a draft model takes one more input token per request
    assert parse_speculative_config(NGRAM).drafting_time_s(batch, price) == 0.0


def test_a_drafter_takes_weights_and_kv_per_token_from_the_cache():
    target = EngineConfig()
    with_draft = EngineConfig(speculative_config=parse_speculative_config(DRAFT_MODEL))
    plain, drafting = plan_memory(target), plan_memory(with_draft)
    # Llama-3.3-70B: 80 layers x 2 x 8 KV heads x 128 x 2 bytes; Llama-3.2-1B: 16 x 2 x 8 x 64 x 2
    assert plain.kv_bytes_per_token == 327_680
    assert drafting.kv_bytes_per_token == 327_680 + 32_768
    assert drafting.weight_bytes == plain.weight_bytes + MODELS["llama-3.2-1b"].weight_bytes
    assert drafting.num_gpu_blocks < plain.num_gpu_blocks


def decode_bound(concurrency, speculative_config=None):
    """Llama-3.1-8B on one H100: 256-token prompts and answers from `concurrency` clients, with
    the budget vLLM gives a GPU of 80 GB (8,192 tokens), so that drafts are never cut."""
    config = EngineConfig(model="llama-3.1-8b", gpu="h100-sxm5", max_num_batched_tokens=8192,
                          max_num_seqs=256, speculative_config=speculative_config)
    num_prompts = 4 if concurrency == 1 else 2 * concurrency
    return serve(config, [(0.0, 256, 256)] * num_prompts, max_concurrency=concurrency).summary()


def test_eagle3_pays_off_one_request_at_a_time_and_loses_its_gain_when_compute_bound():
    eagle3 = parse_speculative_config(EAGLE3)  # vLLM's measured acceptance, k = 3
    alone, alone_eagle = decode_bound(1), decode_bound(1, eagle3)
    assert alone["mean_tpot_ms"] / alone_eagle["mean_tpot_ms"] > 1.8  # well over 1.5x
    busy, busy_eagle = decode_bound(256), decode_bound(256, eagle3)
    assert busy["mean_batch_size"] > 200                      # hundreds of requests per step
    gain = busy_eagle["output_throughput"] / busy["output_throughput"]
    assert gain < 1.25                                        # toward 1x: verifying is paid now
    assert gain < alone_eagle["output_throughput"] / alone["output_throughput"] - 0.8
    # A draft model's 16 layers cost more than the head's one: less gain alone, none when busy.
    draft = parse_speculative_config(DRAFT_MODEL)
    alone_draft, busy_draft = decode_bound(1, draft), decode_bound(256, draft)
    assert 1.5 < alone["mean_tpot_ms"] / alone_draft["mean_tpot_ms"] < (
        alone["mean_tpot_ms"] / alone_eagle["mean_tpot_ms"])
    assert busy_draft["output_throughput"] / busy["output_throughput"] < 1.02


@pytest.mark.parametrize("keys, flags", [(NGRAM, ["--spec-acceptance-rate", "0.5"]),
                                         (EAGLE3, []), (DRAFT_MODEL, [])])
def test_each_method_runs_beside_chunked_prefill_and_prints_vllm_s_acceptance_section(
        capsys, keys, flags):
    code, out, _ = servesim_here(capsys, "run", "--mode", "chunked", "--num-prompts", "10",
                                 "--speculative-config", keys, *flags)
    assert code == 0
    section = out.split("Speculative Decoding")[1].split("Scheduler (servesim)")[0]
    labels = [line.split(":")[0].strip() for line in section.splitlines()[1:-1]]
    assert labels == ["Acceptance rate (%)", "Acceptance length", "Drafts", "Draft tokens",
                      "Accepted tokens", "Per-position acceptance (%)", "Position 0",
                      "Position 1", "Position 2"]
    assert "speculative decoding: " in out.split("=====")[0]  # the header says what ran


def test_speculative_model_is_refused_in_one_line_naming_speculative_config():
    result = servesim("run", "--speculative-model", "llama-3.2-1b", "--num-speculative-tokens", "5")
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "--speculative-config" in line
    assert '{"model": "llama-3.2-1b", "num_speculative_tokens": 5}' in line


@pytest.mark.parametrize("argv, words", [
    (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'], "multi-token"),
    (["--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}'], "needs a model"),
    (["--speculative-config", '{"model": "llama-3.2-1b"}'], "num_speculative_tokens"),
    (["--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 0}'],
     "positive integer"),
    (["--speculative-config", DRAFT_MODEL, "--model", "llama-2-7b"], "vocabulary"),
    (["--speculative-config", DRAFT_MODEL.replace("}", ', "draft_tensor_parallel_size": 1}'),
      "--tensor-parallel-size", "2"], "target's --tensor-parallel-size 2"),
    (["--speculative-config", DRAFT_MODEL.replace("}", ', "tensor_parallel_size": 1}')],
     "draft_tensor_parallel_size"),
    (["--speculative-config", NGRAM], "--spec-acceptance-rate"),
    (["--speculative-config", NGRAM, "--spec-acceptance-rate", "1.5"], "[0, 1]"),
    (["--spec-acceptance-rate", "0.5"], "needs --speculative-config"),
    (["--speculative-config", '{"method": "eagle3", "model": "e", "num_speculative_tokens": 3, '
      '"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.6, 0.1]}'],
     "never grow"),
    (["--speculative-config", "{method: ngram}"], "not JSON"),
    (["--speculative-config", NGRAM.replace("}", ', "quantization": "fp8"}')], "'quantization'"),
    (["--speculative-config", EAGLE3, "--mode", "static"], "STATIC predates it"),
])
def test_bad_speculative_input_is_one_line_and_exit_status_2(capsys, argv, words):
    code, out, err = servesim_here(capsys, "run", *argv)
    assert (code, out) == (2, "")
    assert err.startswith("servesim: error: ") and len(err.splitlines()) == 1
    assert words in err


def test_compare_refuses_the_default_modes_naming_the_knob_and_what_to_type(capsys):
    code, _, err = servesim_here(capsys, "compare", "--speculative-config", EAGLE3)
    assert code == 2 and "--mode continuous,chunked" in err


@pytest.mark.parametrize("keys, method", [
    ({"model": "ngram"}, "ngram"), ({"method": "[ngram]"}, "ngram"),
    ({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}, "eagle"),
    ({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}, "eagle3"),
    ({"model": "llama-3.2-1b"}, "draft_model"),
    ({"method": "draft_model", "model": "my-eagle3-but-a-draft"}, "draft_model"),
])
def test_the_method_is_inferred_from_the_model_as_vllm_infers_it(keys, method):
    keys = {**keys, "num_speculative_tokens": 2}
    assert parse_speculative_config(json.dumps(keys)).method == method


def test_ngram_looks_up_5_to_5_tokens_unless_told_and_one_bound_copies_the_other():
    window = [(c.prompt_lookup_min, c.prompt_lookup_max) for c in (
        parse_speculative_config(NGRAM),
        parse_speculative_config(NGRAM.replace("}", ', "prompt_lookup_max": 3}')),
        parse_speculative_config(NGRAM.replace("}", ', "prompt_lookup_min": 2}')))]
    assert window == [(5, 5), (3, 3), (2, 2)]


def test_acceptance_comes_from_the_flag_vllm_s_synthetic_keys_or_the_measured_default():
    eagle3 = parse_speculative_config(EAGLE3)
    assert eagle3.acceptance().per_position() == pytest.approx((0.7296, 0.5208, 0.3545))
    longer = replace(eagle3, num_speculative_tokens=5).acceptance().conditional_rates
    assert longer[3:] == (longer[2], longer[2])  # past the measured positions: the last rate
    assert replace(eagle3, acceptance_rate=0.4).acceptance().conditional_rates == (0.4,) * 3
    by_length = json.loads(EAGLE3) | {"rejection_sample_method": "synthetic",
                                      "synthetic_acceptance_length": 2.5}
    # vLLM's least-spread rates for a mean length of 2.5: the first draft always, the second half
    assert parse_speculative_config(json.dumps(by_length)).acceptance().per_position() == (
        1.0, 0.5, 0.0)
    draft = parse_speculative_config(DRAFT_MODEL).acceptance().per_position()
    assert 1 + sum(draft) == pytest.approx(2.86)  # vLLM's reference mean acceptance length
