"""diagnose: configs that plainly have each bottleneck are named so from their counters; the
search keeps a change only if it raises goodput (or, at equal goodput, helps the bottleneck
without a headline metric 10% worse), never lowers goodput, and adds GPUs only when no same-GPU
change meets the SLO; each kept change is what `run` gives with its flags; published tuning
guidance is what it finds first (or it shows its own pick beating it); --observed agrees with the
simulation it was taken from and not with one whose ITL is three times as long; bad input gets
one line."""

import contextlib
import functools
import io
import json
import os

import pytest

import main
from commands import cli
from commands.bottleneck import BOTTLENECKS
from commands.tuning import MAX_RESIMULATIONS, SLO_ATTAINMENT_PCT, bigger_gpu
from presets import GPUS

MIXED = ["--num-prompts", "40"]  # the lesson's mixed traffic at 4 req/s, on 70B FP8 and one H200
LONG_PROMPTS = ["--dataset-name", "random", "--random-input-len", "6000", "--random-output-len",
                "100", "--num-prompts", "20", "--request-rate", "2"]
LESSON_SETUP = ["--gpu", "h100-sxm5", "--dataset-name", "random", "--random-input-len", "1000",
                "--random-output-len", "500", "--num-prompts", "128", "--max-concurrency", "128"]
SMALL_8B = ["--model", "llama-3.1-8b", "--gpu", "l4"]
LESSON_BUDGET = ["--max-num-batched-tokens", "512", "--max-num-seqs", "256"]
EAGLE3_8B = '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", ' \
            '"num_speculative_tokens": 3}'
# One config per bottleneck, each the plain case the issue names.
PLAIN = {
    # 600 blocks (9,600 tokens) for 40 mixed requests where the memory holds 190,000
    "hand_set_pool": ["--num-gpu-blocks-override", "600", *MIXED],
    # 8B on a 24 GB L4: 24 seats of mixed traffic need more than the 35,000 tokens it holds
    "kv_starvation": [*SMALL_8B, "--max-num-seqs", "24", *MIXED],
    # 2,000 shared tokens before every prompt, recomputed with the cache off
    "prefix_cache_off": ["--dataset-name", "random", "--random-prefix-len", "2000",
                         "--random-input-len", "200", "--random-output-len", "100",
                         "--num-prompts", "30", "--request-rate", "4",
                         "--no-enable-prefix-caching"],
    # two seats for 40 requests arriving at 4 a second
    "batching_stall": ["--max-num-seqs", "2", *MIXED],
    # 6,000-token prompts, each computed whole in one step beside the decodes
    "chunk_missized": ["--no-enable-chunked-prefill", *LONG_PROMPTS],
    # 64-token chunks of 70B on an H200, whose weights take as long as ~130 tokens of GEMMs
    "chunk_missized-small": ["--max-num-batched-tokens", "64", "--max-num-seqs", "64", *MIXED],
    # 128 clients of 8B with EAGLE-3: about 90 decodes x 4 tokens verified a step
    "speculation_overhead": ["--model", "llama-3.1-8b", "--gpu", "h100-sxm5", "--dataset-name",
                             "random", "--random-input-len", "100", "--random-output-len", "100",
                             "--num-prompts", "200", "--max-concurrency", "128",
                             "--speculative-config", EAGLE3_8B],
    # the lesson's own: 70B FP8 on one 80 GB card, 128 clients
    "hbm_bound": LESSON_SETUP,
    # one request every five seconds to a 70B model
    "decode_floor": ["--dataset-name", "random", "--random-input-len", "500",
                     "--random-output-len", "300", "--num-prompts", "10", "--request-rate", "0.2"],
    # 8B on an H100 at 8 req/s: about 60 running, nobody waiting long
    "none": ["--model", "llama-3.1-8b", "--gpu", "h100-sxm5", "--dataset-name", "random",
             "--random-input-len", "1000", "--random-output-len", "1000", "--num-prompts", "150",
             "--request-rate", "8"],
}


@functools.lru_cache(maxsize=None)
def printed(*argv) -> str:
    """What `python3 code/main.py ARGV...` prints, run in this process (once per argv).
    diagnose runs without the invariant checker: its search serves the same engine some thirty
    times a config, which the checker would make the suite's slowest minute; the engine's
    invariants are checked on `run` here, and on the workloads made to break it
    (test_invariants.py, test_fuzz.py)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), invariant_checks(argv[0] != "diagnose"):
        assert cli.main(list(argv), main.simulate, main.knobs()) == 0
    return buffer.getvalue()


@contextlib.contextmanager
def invariant_checks(on: bool):
    saved = os.environ.pop("SERVESIM_CHECK_INVARIANTS", None)
    if on and saved is not None:
        os.environ["SERVESIM_CHECK_INVARIANTS"] = saved
    try:
        yield
    finally:
        if saved is not None:
            os.environ["SERVESIM_CHECK_INVARIANTS"] = saved


def diagnosis(*argv) -> dict:
    return json.loads(printed("diagnose", *argv, "--format", "json"))


def as_diagnosed(argv) -> list[str]:
    """argv with the flags diagnose took at vLLM's defaults written out, so that `run` serves
    the same config."""
    assumed = diagnosis(*argv)["assumed_vllm_defaults"]
    return [*argv, *(part for flag in assumed for part in flag.split())]


def run_result(*argv) -> dict:
    """`run`'s JSON result for the same flags (its --mode chunked is its own default, so
    chunked prefill off is written --mode continuous there)."""
    argv = [arg for arg in argv if arg != "--no-enable-chunked-prefill"] + (
        ["--mode", "continuous"] if "--no-enable-chunked-prefill" in argv else [])
    if "--enable-chunked-prefill" in argv:
        argv = [arg for arg in argv if arg != "--enable-chunked-prefill"
                and arg != "continuous" and arg != "--mode"]
    return json.loads(printed("run", *argv, "--format", "json"))["results"][0]


def with_flags(argv: list[str], flags: dict) -> list[str]:
    """argv with a recommendation's flags set: a value replaces the flag's, None leaves it out,
    True and False turn a --[no-] switch on and off."""
    argv = list(argv)
    for flag, value in flags.items():
        for spelling in (flag, "--no-" + flag[2:]):
            if spelling in argv:
                at = argv.index(spelling)
                switch = spelling.startswith("--no-") or value in (True, False)
                del argv[at:at + (1 if switch else 2)]
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + flag[2:])
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def test_every_bottleneck_has_a_plain_case():
    assert {case.split("-")[0] for case in PLAIN} == set(BOTTLENECKS)


@pytest.mark.parametrize("case", sorted(PLAIN))
def test_a_config_that_plainly_has_a_bottleneck_is_named_so(case):
    assert diagnosis(*PLAIN[case])["bottleneck"] == case.split("-")[0]


@pytest.mark.parametrize("case", ["batching_stall", "hand_set_pool", "none"])
def test_the_counters_it_read_are_those_run_reports_for_the_same_flags(case):
    evidence = diagnosis(*PLAIN[case])["evidence"]
    result = run_result(*as_diagnosed(PLAIN[case]))
    for name in ("waiting_on_kv_blocks_pct", "waiting_on_max_num_seqs_pct",
                 "waiting_on_prompt_budget_pct", "num_preemptions", "recomputed_pct",
                 "median_itl_ms", "p99_itl_ms", "prompt_time_pct", "mean_ttft_ms"):
        assert evidence[name] == result[name], name


def test_flags_left_out_take_vllms_defaults_for_the_gpu_and_say_so():
    h200, l4 = diagnosis(*MIXED), diagnosis(*SMALL_8B, *MIXED)
    assert h200["assumed_vllm_defaults"] == ["--max-num-batched-tokens 8192",
                                             "--max-num-seqs 1024",
                                             "--gpu-memory-utilization 0.92"]
    assert l4["assumed_vllm_defaults"][:2] == ["--max-num-batched-tokens 2048",
                                               "--max-num-seqs 256"]
    given = diagnosis("--max-num-seqs", "64", *MIXED)["assumed_vllm_defaults"]
    assert "--max-num-seqs 1024" not in given and len(given) == 2


def test_a_config_vllm_would_refuse_is_hbm_bound_by_the_memory_plans_own_figures():
    found = diagnosis(*LESSON_SETUP)
    assert found["kind"] == "refused" and "refuse to start" in found["reason"]
    assert found["evidence"]["kv_cache_tokens"] < found["evidence"]["max_model_len"] == 8192
    assert any(c["status"] == "refused" for c in found["compatibility"])
    code, out, err = run_here("run", *as_diagnosed(LESSON_SETUP))
    fits = f"--max-model-len {found['evidence']['kv_cache_tokens']}"
    assert code == 2 and fits in err  # what `run` refuses, and its advice


def kept_steps(case):
    """(argv before, the kept change) for each kept change of a plain case, in order."""
    argv = as_diagnosed(PLAIN[case])
    for kept in diagnosis(*PLAIN[case])["recommendations"]:
        yield argv, kept
        argv = with_flags(argv, kept["flags"])


@pytest.mark.parametrize("case", ["batching_stall", "hand_set_pool", "kv_starvation"])
def test_every_kept_change_is_what_run_gives_with_its_flags_on_top_of_those_before(case):
    steps = list(kept_steps(case))
    assert steps
    for argv, kept in steps:
        after = run_result(*with_flags(argv, kept["flags"]))
        assert after[kept["metric"]] == pytest.approx(kept["after"]) if (
            kept["metric"] != "good_requests") else True
        assert after["mean_ttft_ms"] == kept["also"]["mean_ttft_ms"][1]
        assert after["output_throughput"] == kept["also"]["output_throughput"][1]


@pytest.mark.parametrize("case", sorted(PLAIN))
def test_no_kept_change_lowers_goodput_and_each_prints_every_headline_metric(case):
    for kept in diagnosis(*PLAIN[case])["recommendations"]:
        if kept["before"] is None:  # vLLM would not have started: now it serves
            assert kept["refused"] is None
            continue
        before, after = kept["also"]["good_requests"]
        assert after >= before
        assert {"mean_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "output_throughput",
                "request_goodput"} <= set(kept["also"])


@pytest.mark.parametrize("case", sorted(PLAIN))
def test_no_recommendation_adds_gpus_while_a_change_on_the_same_gpus_meets_the_slo(case):
    found = diagnosis(*PLAIN[case])
    sent = found["num_requests"]
    same_gpu = [trial for trial in found["recommendations"] + found["tried"]
                if trial["gpus"][0] == trial["gpus"][1] and trial["flag"] != "--gpu"
                and trial["refused"] is None and trial["also"]]
    met = any(100 * trial["also"]["good_requests"][1] >= SLO_ATTAINMENT_PCT * sent
              for trial in same_gpu)
    if met or (found["simulated"] and
               100 * found["simulated"]["good_requests"] >= SLO_ATTAINMENT_PCT * sent):
        assert found["more_gpus"] == []
        assert all(r["gpus"][1] == r["gpus"][0] for r in found["recommendations"])


def test_more_gpus_come_last_and_only_when_they_raise_goodput():
    found = diagnosis(*PLAIN["batching_stall"])
    flags = [r["flag"] for r in found["recommendations"]]
    assert flags[0] == "--max-num-seqs" and "--tensor-parallel-size" not in flags[:-1]
    served = [trial for trial in found["more_gpus"] if trial["also"]]
    assert served
    for trial in served:
        before, after = trial["also"]["good_requests"]
        assert trial["kept"] == (after > before and trial is max(
            served, key=lambda t: t["also"]["request_goodput"][1] / t["gpus"][1]))


def test_a_healthy_config_gets_no_recommendation_and_says_what_to_watch():
    found = diagnosis(*PLAIN["none"])
    assert found["kind"] == "healthy" and found["recommendations"] == []
    assert "num_requests_waiting" in found["measure_next"]


def test_diagnose_serves_the_workload_a_bounded_number_of_times():
    calls = []

    def counting_simulate(*args, **kwargs):
        calls.append(args)
        return main.simulate(*args, **kwargs)

    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["diagnose", *PLAIN["batching_stall"]], counting_simulate,
                        main.knobs()) == 0
    assert 2 <= len(calls) <= MAX_RESIMULATIONS + 3
    found = diagnosis(*PLAIN["batching_stall"])
    replicas = [t for t in found["more_gpus"] if t["flag"] == "--data-parallel-size"
                and t["refused"] is None]  # served by the cluster's loop (cluster.py)
    assert len(calls) + len(replicas) == found["num_simulations"]


def test_the_json_has_the_contract_fields():
    found = diagnosis(*PLAIN["batching_stall"])
    assert {"bottleneck", "evidence", "recommendations", "compatibility",
            "measure_next"} <= set(found)
    assert set(found["evidence_units"]) == set(found["evidence"])
    assert {"flag", "value", "metric", "before", "after"} <= set(found["recommendations"][0])
    assert "observed" not in found and "observed_matches" not in found


# -- published guidance: the symptom, and the change the guidance gives -----------------------

GUIDANCE = {
    # G1: frequent preemptions: more memory, fewer seats or a smaller budget, or TP
    "G1": ([*SMALL_8B, "--max-num-seqs", "24", *MIXED],
           {"--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens",
            "--tensor-parallel-size", "--kv-cache-dtype"}),
    # G15: the same preemptions, traced to seats the pool cannot hold: fewer seats
    "G15": ([*SMALL_8B, "--max-num-seqs", "24", *MIXED], {"--max-num-seqs"}),
    # G3: 4,000-token prompts through a 512-token budget on an H100: a larger budget
    "G3": (["--model", "llama-3.1-8b", "--gpu", "h100-sxm5", *LESSON_BUDGET, "--dataset-name",
            "random", "--random-input-len", "4000", "--random-output-len", "100",
            "--num-prompts", "100", "--request-rate", "8"], {"--max-num-batched-tokens"}),
    # G7: 2,000-token requests at 1 req/s fill an L4's 33,000-token pool: an FP8 KV cache
    "G7": ([*SMALL_8B, "--dataset-name", "random", "--random-input-len", "1500",
            "--random-output-len", "500", "--num-prompts", "60", "--request-rate", "1"],
           {"--kv-cache-dtype"}),
    # G11: 8B on an MI300X with 256 seats for 300 clients: seats, memory, FP8 KV, budget, or
    # instances rather than TP
    "G11": (["--model", "llama-3.1-8b", "--gpu", "mi300x", "--max-num-seqs", "256",
             "--dataset-name", "random", "--random-input-len", "1000", "--random-output-len",
             "500", "--num-prompts", "300", "--max-concurrency", "300"],
            {"--max-num-seqs", "--gpu-memory-utilization", "--kv-cache-dtype",
             "--max-num-batched-tokens", "--data-parallel-size"}),
    # G12: one request at a time on an L4, wanting 50 ms a token: speculate (or FP8)
    "G12": ([*SMALL_8B, "--dataset-name", "random", "--random-input-len", "500",
             "--random-output-len", "200", "--num-prompts", "6", "--max-concurrency", "1",
             "--goodput", "tpot:50"], {"--speculative-config", "--kv-cache-dtype"}),
    # G14: a small model with 32 seats at 30 req/s: seats in the hundreds (or budget, memory)
    "G14": (["--model", "llama-3.1-8b", "--gpu", "h100-sxm5", "--max-num-seqs", "32",
             "--dataset-name", "random", "--random-input-len", "500", "--random-output-len",
             "300", "--num-prompts", "200", "--request-rate", "30"],
            {"--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization"}),
    # G16: Qwen3-8B's 40,960-token context does not fit an L4: memory, FP8 KV or a shorter
    # context
    "G16": (["--model", "qwen3-8b", "--gpu", "l4", "--num-prompts", "20"],
            {"--gpu-memory-utilization", "--kv-cache-dtype", "--max-model-len"}),
    # G2: a long prompt's whole step in the ITL tail: a smaller budget for ITL
    "G2": (MIXED, {"--max-num-batched-tokens"}),
    # G6: the pool holds less than one max_model_len sequence: lower it (or more memory)
    "G6": ([*SMALL_8B, "--max-model-len", "131072", *MIXED],
           {"--max-model-len", "--gpu-memory-utilization"}),
    # G8: one client, a per-token SLO the weight stream alone misses: speculate (or FP8)
    "G8": (["--dataset-name", "random", "--random-input-len", "500", "--random-output-len", "200",
            "--num-prompts", "6", "--max-concurrency", "1", "--goodput", "tpot:15"],
           {"--speculative-config", "--kv-cache-dtype"}),
    # G10: prompts that share a long prefix, caching off: turn it on
    "G10": (PLAIN["prefix_cache_off"], {"--enable-prefix-caching"}),
    # G13: one seat: every request waits for the one before it
    "G13": (["--max-num-seqs", "1", "--num-prompts", "20"], {"--max-num-seqs"}),
    # G5: a 16-bit 70B model on one 80 GB card does not start: split it with TP
    "G5": (["--model", "llama-3.3-70b", "--gpu", "h100-sxm5", "--num-prompts", "20"],
           {"--tensor-parallel-size", "--max-model-len", "--max-num-seqs"}),
    # G9: a draft model accepted 30% of the time under 100 clients and a tight per-token SLO:
    # the drafts' compute costs more than it saves, so speculation goes off
    "G9": (["--model", "llama-3.1-8b", "--gpu", "h100-sxm5", "--dataset-name", "random",
            "--random-input-len", "200", "--random-output-len", "100", "--num-prompts", "100",
            "--max-concurrency", "100", "--speculative-config",
            '{"model": "llama-3.2-1b", "num_speculative_tokens": 4}', "--spec-acceptance-rate",
            "0.3", "--goodput", "tpot:12"], {"--speculative-config"}),
}


# Where the guidance says which way a knob goes: (flag, +1 up or -1 down).
DIRECTION = {"G2": ("--max-num-batched-tokens", -1), "G3": ("--max-num-batched-tokens", +1),
             "G14": ("--max-num-seqs", +1), "G15": ("--max-num-seqs", -1)}


@pytest.mark.parametrize("symptom", sorted(GUIDANCE))
def test_the_first_kept_change_is_the_guidances_or_beats_it_on_goodput(symptom):
    argv, guidance = GUIDANCE[symptom]
    found = diagnosis(*argv)
    first = found["recommendations"][0]
    flag, way = DIRECTION.get(symptom, (None, 0))
    if first["flag"] in guidance and first["flag"] != flag:
        return
    if first["flag"] == flag:  # the way the guidance turns it, from the value diagnose read
        [read] = [row["value"] for row in found["config_read"] if row["flag"] == flag]
        assert (first["value"] - int(read)) * way > 0, (symptom, first, read)
        return
    first_goodput = first["also"]["good_requests"][1]
    rivals = [t for t in found["tried"] if t["flag"] in guidance and t["before"] == first["before"]]
    assert rivals, f"{symptom}: the guidance's change was never served"
    assert all(t["also"] and t["also"]["good_requests"][1] <= first_goodput for t in rivals)


def test_an_fp8_kv_cache_and_a_shorter_context_say_what_they_cost_beyond_the_figures():
    [fp8] = [r for r in diagnosis(*GUIDANCE["G7"][0])["recommendations"]
             if r["flag"] == "--kv-cache-dtype"]
    assert len(fp8["caveats"]) == 1 and "accuracy" in fp8["caveats"][0]
    shorter = diagnosis(*GUIDANCE["G6"][0])["recommendations"][0]
    assert shorter["flag"] == "--max-model-len"
    assert f"{shorter['value']:,} tokens" in shorter["caveats"][0]
    text = printed("diagnose", *GUIDANCE["G7"][0])
    assert "--kv-cache-dtype fp8:" in text and "Caveat: an accuracy trade" in text


def test_a_model_that_fits_one_gpu_is_scaled_by_replicas_rather_than_tensor_parallelism():
    """G4 (vLLM: data parallelism "when you need to scale throughput rather than model size")
    and G11 (AMD: N instances beat one across N GPUs): 8B at 150 req/s, past one H100."""
    found = diagnosis("--model", "llama-3.1-8b", "--gpu", "h100-sxm5", "--dataset-name",
                      "random", "--random-input-len", "1000", "--random-output-len", "200",
                      "--num-prompts", "200", "--request-rate", "150")
    options = {option["flag"]: option for option in found["more_gpus"]}
    assert set(options) == {"--tensor-parallel-size", "--data-parallel-size", "--gpu"}
    assert options["--gpu"]["value"] == "h200" and options["--gpu"]["gpus"] == [1, 1]
    assert options["--data-parallel-size"]["kept"] and not options["--tensor-parallel-size"]["kept"]
    assert found["recommendations"][-1]["flag"] == "--data-parallel-size"
    replicas, tensor = (options[flag]["also"]["request_goodput"][1]
                        for flag in ("--data-parallel-size", "--tensor-parallel-size"))
    assert replicas >= tensor
    assert found["kind"] != "refused" and found["more_gpus"][0]["gpus"] == [1, 2]


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_a_bigger_gpu_is_the_same_vendors_with_more_memory_and_nothing_less(gpu):
    bigger = bigger_gpu(gpu)
    if bigger is None:
        return
    now, then = GPUS[gpu], GPUS[bigger]
    assert then.vendor == now.vendor and then.memory_gib >= 1.5 * now.memory_gib
    assert then.memory_bandwidth_gbs >= now.memory_bandwidth_gbs
    assert then.bf16_tflops >= now.bf16_tflops


def test_llama_8b_on_an_l4_at_its_full_context_is_told_to_lower_max_model_len_not_to_add_gpus():
    found = diagnosis(*GUIDANCE["G6"][0])
    assert found["kind"] == "refused"
    first = found["recommendations"][0]
    assert first["flag"] == "--max-model-len" and first["gpus"] == [1, 1]
    assert first["value"] < 131072


# -- --observed ------------------------------------------------------------------------------

BENCH_KEYS = ("completed", "duration", "request_throughput", "output_throughput",
              "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
              "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms")


def saved_result(path, argv, scale_itl=1.0, **sent) -> str:
    """What `vllm bench serve --save-result` would have written for `run ARGV`, ITLs scaled."""
    result = run_result(*as_diagnosed(argv))
    saved = {key: result[key] for key in BENCH_KEYS}
    for key in ("mean_itl_ms", "median_itl_ms", "p99_itl_ms"):
        saved[key] *= scale_itl
    saved.update(sent)
    path.write_text(json.dumps(saved))
    return str(path)


def test_observed_figures_equal_to_the_simulation_agree(tmp_path):
    found = diagnosis(*MIXED, "--observed", saved_result(tmp_path / "same.json", MIXED))
    assert found["observed_matches"] is True
    assert all(figure["agrees"] for figure in found["comparison"])
    assert "warm_prefix_cache" not in found  # first tokens as simulated: served cold only


# 6,000-token prompts at 1 req/s: the first token is mostly the prompt's compute
RESENT = ["--dataset-name", "random", "--random-input-len", "6000", "--random-output-len", "100",
          "--num-prompts", "20", "--request-rate", "1"]
FIGURES = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
           "mean_itl_ms", "output_throughput")


def test_first_tokens_far_sooner_than_simulated_are_diagnosed_with_the_cache_warm_too(tmp_path):
    cold = run_result(*as_diagnosed(RESENT))
    sooner = {key: cold[key] * (0.1 if "ttft" in key else 1.0) for key in FIGURES}
    (tmp_path / "sooner.json").write_text(json.dumps(sooner))
    found = diagnosis(*RESENT, "--observed", str(tmp_path / "sooner.json"))
    warm = found["warm_prefix_cache"]
    assert warm["simulated"]["mean_ttft_ms"] < 0.1 * found["simulated"]["mean_ttft_ms"]
    assert {f["metric"]: f["simulated"] for f in found["comparison"]}["mean_ttft_ms"] == (
        cold["mean_ttft_ms"])  # the cold run is still the one `run` gives
    # a deployment measured as the warm run: it matches that run, which is the one tuned
    as_warm = {key: warm["simulated"][key] for key in FIGURES}
    (tmp_path / "warm.json").write_text(json.dumps(as_warm))
    found = diagnosis(*RESENT, "--observed", str(tmp_path / "warm.json"))
    warm = found["warm_prefix_cache"]
    assert warm["observed_matches"] is True and found["observed_matches"] is False
    assert warm["tuned"] is True and warm["bottleneck"] != found["bottleneck"]
    text = printed("diagnose", *RESENT, "--observed", str(tmp_path / "warm.json"))
    assert "The observation matches the run with the prefix cache warm" in text
    assert "Served again with the prefix cache warm" in text
    # with prefix caching off nothing could have been warm: the cold run alone
    found = diagnosis(*RESENT, "--no-enable-prefix-caching", "--observed",
                      str(tmp_path / "warm.json"))
    assert "warm_prefix_cache" not in found


def test_observed_itl_three_times_the_simulation_disagrees_and_points_outside(tmp_path):
    found = diagnosis(*MIXED, "--observed",
                      saved_result(tmp_path / "slow.json", MIXED, scale_itl=3.0))
    assert found["observed_matches"] is False
    disagreeing = {f["metric"] for f in found["comparison"] if not f["agrees"]}
    assert disagreeing == {"mean_itl_ms", "median_itl_ms", "p99_itl_ms"}
    assert any("outside the scheduler" in note for note in found["observed_notes"])


def test_observed_says_what_was_sent(tmp_path):
    path = saved_result(tmp_path / "sent.json", ["--num-prompts", "12", "--request-rate", "2"],
                        request_rate=2, num_prompts=12, max_concurrency=None, burstiness=1.0)
    found = diagnosis("--observed", path)
    assert found["sent_from_observed"] == ["--request-rate 2", "--burstiness 1",
                                           "--num-prompts 12"]
    result = run_result(*as_diagnosed(["--num-prompts", "12", "--request-rate", "2"]))
    assert {key: found["simulated"][key] for key in BENCH_KEYS} == {
        key: result[key] for key in BENCH_KEYS}
    assert found["observed_matches"] is True


# -- refusals and bad input -------------------------------------------------------------------

def run_here(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv), main.simulate, main.knobs())
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("text, says", [
    (None, "no such file"),
    ("{", "is not JSON"),
    ("[1, 2]", "one JSON object"),
    ('{"mean_itl_ms": "fast"}', "mean_itl_ms must be a number"),
    ('{"mean_itl_ms": NaN}', "NaN is not a finite number"),
    ('{"p99_itl_ms": Infinity}', "Infinity is not a finite number"),
    ('{"mean_itl_ms": 20, "request_rate": -1}', "request_rate must be a number > 0"),
    ('{"mean_itl_ms": 20, "num_prompts": 2.5}', "num_prompts must be a positive integer"),
    ('{"mean_itl_ms": true}', "mean_itl_ms must be a number"),
    ('{"completed": 3}', "holds none of the figures"),
])
def test_a_bad_observed_file_is_refused_in_one_line(tmp_path, text, says):
    path = tmp_path / "observed.json"
    if text is not None:
        path.write_text(text)
    code, out, err = run_here("diagnose", *MIXED, "--observed", str(path))
    assert (code, out) == (2, "")
    assert err.startswith("servesim: error: --observed") and says in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("argv, says", [
    (["--gpu-memory-utilization", "0.6"], "raise the ceiling before tuning the scheduler"),
    (["--forward-model", "linear"], "leave out --forward-model linear"),
    (["--block-size", "0"], "--block-size must be 1, 2, 4, 8 or a multiple of 16"),
    (["--goodput", "tpot"], "is not KEY:MILLISECONDS"),
])
def test_refusals_come_before_anything_runs(argv, says):
    code, out, err = run_here("diagnose", *MIXED, *argv)
    assert (code, out) == (2, "") and says in err and err.count("\n") == 1


def test_a_flag_that_contradicts_what_observed_says_was_sent_is_refused(tmp_path):
    path = saved_result(tmp_path / "four.json", MIXED, request_rate=4)
    code, _, err = run_here("diagnose", *MIXED, "--request-rate", "8", "--observed", path)
    assert code == 2 and "--request-rate 8.0 and --observed's request_rate 4 disagree" in err


def test_a_slow_h100_class_deployment_is_sent_outside_vllm_unless_the_traffic_explains_it(
        tmp_path):
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"output_throughput": 50.0, "mean_itl_ms": 25.0}))
    code, _, err = run_here("diagnose", *MIXED, "--observed", str(path))
    assert code == 2 and "look outside vLLM" in err
    one_client = ["--dataset-name", "random", "--random-input-len", "200",
                  "--random-output-len", "100", "--num-prompts", "4", "--max-concurrency", "1"]
    assert run_result(*one_client)["output_throughput"] < 100  # one request at a time on 70B
    assert run_here("diagnose", *one_client, "--observed", str(path))[0] == 0


# -- what vLLM refuses and accepts ---------------------------------------------------------

def compatibility(*argv) -> list[dict]:
    return diagnosis(*argv)["compatibility"]


def test_chunked_prefill_with_a_draft_model_is_accepted_with_the_versions_where_it_was_not():
    checks = compatibility("--speculative-config",
                           '{"model": "llama-3.2-1b", "num_speculative_tokens": 3}', *LESSON_BUDGET,
                           *MIXED)
    chunked = next(c for c in checks if c["flags"].startswith("--enable-chunked-prefill"))
    assert chunked["status"] == "accepted" and "0.15.0" in chunked["versions"]
    assert 'V0 up to 0.6.3: chunked prefill and any speculation are "currently mutually' in (
        chunked["text"])
    budget = next(c for c in checks if c["flags"].startswith("--speculative-config draft_model"))
    assert "512 - 256 = 256" in budget["text"]  # v0.18.0 takes max_num_seqs off the budget


def test_cpu_ngram_with_async_scheduling_is_refused_and_lora_needs_room_for_the_drafts():
    checks = compatibility("--speculative-config", '{"method": "ngram", "num_speculative_tokens": '
                           '3}', "--spec-acceptance-rate", "0.5", *LESSON_BUDGET, *MIXED)
    statuses = {c["flags"]: c["status"] for c in checks}
    assert statuses["--speculative-config method ngram with --async-scheduling"] == "refused"
    assert statuses["--speculative-config with --enable-lora"] == "refused"  # 512 < 256 x 4
    assert not compatibility(*MIXED)


def test_a_budget_below_max_num_seqs_is_refused_as_vllm_refuses_it():
    code, out, err = run_here("diagnose", "--max-num-batched-tokens", "128", *MIXED)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "--max-num-batched-tokens 128 is below" in err and "1024" in err  # vLLM's seats


def test_a_concurrency_limit_where_observed_says_there_was_none_is_refused(tmp_path):
    path = saved_result(tmp_path / "open.json", MIXED, max_concurrency=None)
    code, _, err = run_here("diagnose", *MIXED, "--max-concurrency", "8", "--observed", path)
    assert code == 2 and "max_concurrency null (no limit)" in err


def test_the_skill_file_names_speculative_config_and_the_v0_flag_only_as_removed():
    from readme_blocks import SKILL
    text = SKILL.read_text(encoding="utf-8")
    assert "--speculative-config" in text
    paragraphs = [p for p in text.split("\n\n") if "--speculative-model" in p]
    assert paragraphs and all("removed" in p for p in paragraphs)


def test_a_deployment_observed_inside_its_slo_gets_no_advice(tmp_path):
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps({"p99_ttft_ms": 900.0, "p99_tpot_ms": 40.0, "mean_itl_ms": 30.0}))
    found = diagnosis(*PLAIN["batching_stall"], "--observed", str(fast))
    assert found["observed_meets_slo"] is True and found["recommendations"] == []
    # served as given (and, its first tokens far sooner than simulated, once with the cache warm)
    assert found["num_simulations"] == 1 + ("warm_prefix_cache" in found)
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps({"median_ttft_ms": 9000.0, "p99_tpot_ms": 40.0,
                                "mean_itl_ms": 30.0}))
    found = diagnosis(*PLAIN["batching_stall"], "--observed", str(slow))
    assert found["observed_meets_slo"] is False and found["recommendations"]


def test_speculation_that_costs_more_than_it_saves_is_turned_off():
    found = diagnosis(*GUIDANCE["G9"][0])
    assert found["bottleneck"] == "speculation_overhead"
    first = found["recommendations"][0]
    assert first["flags"]["--speculative-config"] is None  # off, not a different k
    before, after = first["also"]["mean_tpot_ms"]
    assert after < before
