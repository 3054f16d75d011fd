"""`python3 code/main.py lesson-check`: the lesson's numbers against physics and simulation.

The lesson asks learners to remember figures for Llama 3.3 70B FP8 on one H100 SXM5. Each check
below states a claim, computes or simulates it under the lesson's own setup, looks for hardware
where it would hold, and gives a verdict with the one limit that decides it:

    memory capacity   the weights leave too little HBM for the KV cache the claim needs
    bandwidth floor   a decode step must stream every weight byte once: bytes / bandwidth
    compute peak      a prefill must do 2 x params x tokens FLOPs: FLOPs / peak
    fixed costs       per-layer work and all-reduces that more GPUs do not split

Every figure printed comes from `presets.py`, `gpu_memory.py`, `forward_model.py` or a run of the
engine; nothing here is typed in except the claims themselves, and, for the one claim about what
a vLLM version accepts, what each version's own code does (a table with its source, in
vllm_facts.py).
"""

import textwrap
from dataclasses import dataclass, field, replace

from commands.flags import removed_speculative_flags
from commands.vllm_facts import CHUNKED_PREFILL_WITH_A_DRAFT_MODEL
from config import ConfigError, EngineConfig, Knobs
from forward_model import RooflineClock, make_clock
from gpu_memory import GIB, lookup, plan_memory
from modes import MODES
from metrics import percentile
from request import Request
from commands.speculative_flag import parse_speculative_config
from workload import Workload, mixed_workload, random_workload

MODEL = "llama-3.3-70b-fp8"
LESSON = EngineConfig(model=MODEL, gpu="h100-sxm5")  # vLLM's defaults otherwise
# The most one H100 can give the KV cache: vLLM's highest common utilization and FP8 KV, with
# max_model_len just above the throughput workload's 1,500-token sequences; at vllm serve's
# budget on an H100 (8,192 tokens), which its profiling pass runs (gpu_memory.profile_num_tokens).
H100_BEST = replace(LESSON, gpu_memory_utilization=0.95, kv_cache_dtype="fp8", max_model_len=2048,
                    max_num_batched_tokens=8192)
# Candidates for "where it would hold", smallest first.
ELSEWHERE = [replace(LESSON, gpu="h200"), replace(LESSON, tensor_parallel_size=2),
             replace(LESSON, gpu="h200", tensor_parallel_size=2),
             replace(LESSON, tensor_parallel_size=4), replace(LESSON, tensor_parallel_size=8)]

CONCURRENCY = 128                 # the lesson's "128 concurrent requests"
INPUT_LEN, OUTPUT_LEN = 1000, 500  # 1,500 tokens per request: the lesson's average use
# The lesson's gotcha, as v0.18.0 writes it: a Llama 3 draft model, 3 drafts a step.
DRAFT_MODEL, NUM_DRAFTS = "llama-3.2-1b", 3


@dataclass
class Check:
    claim: str
    findings: list[str] = field(default_factory=list)
    verdict: str = ""


def hardware_name(config: EngineConfig) -> str:
    _, gpu = lookup(config)
    count = f"{config.tensor_parallel_size}x " if config.tensor_parallel_size > 1 else "one "
    return f"{count}{gpu.name}"


class LessonCheck:
    """Runs the engine on the lesson's setups; `simulate` is main.simulate, and the knobs at the
    top of code/main.py (block size, batch size, chunked budget) apply to every simulation."""

    def __init__(self, simulate, knobs: Knobs = Knobs()):
        self.simulate = simulate
        self.knobs = knobs
        self._cache: dict = {}
        self._recorders: dict = {}

    def served(self, config: EngineConfig, mode: str, workload_name: str):
        """The run's recorder (metrics.RunRecorder), simulated once per setup."""
        config = replace(config, **self.knobs.engine_defaults())
        key = (config, mode, workload_name)
        if key not in self._recorders:
            plan = plan_memory(config)
            self._recorders[key] = self.simulate(WORKLOADS[workload_name](), MODES[mode], config,
                                                 plan.num_gpu_blocks, make_clock(config))
        return self._recorders[key]

    def run(self, config: EngineConfig, mode: str, workload_name: str) -> dict:
        key = (config, mode, workload_name)
        if key not in self._cache:
            self._cache[key] = self.served(config, mode, workload_name).summary()
        return self._cache[key]

    def checks(self) -> list[Check]:
        return [self.kv_per_sequence(), self.prefill_32k(), self.throughput_all_on(),
                self.throughput_unchunked(), self.naive_loop(), self.kv_waste(),
                self.itl_tail(), self.ttft_tail(), self.draft_model_with_chunked_prefill()]

    # -- arithmetic ---------------------------------------------------------------------------

    def kv_per_sequence(self) -> Check:
        model, _ = lookup(LESSON)
        per_token = model.kv_bytes_per_token("auto")
        total = per_token * 8192
        check = Check("KV cache of one 8,192-token sequence in BF16: about 1.25 GB")
        check.findings.append(
            f"{model.num_layers} layers x 2 (K and V) x {model.num_kv_heads} KV heads x "
            f"{model.head_dim} x 2 bytes = {per_token:,} B/token; x 8,192 = {total / 1e9:.2f} GB "
            f"({total / GIB:.2f} GiB)")
        check.verdict = (f"off by {total / 1.25e9:.1f}x: 1.25 GB is what FP8 KV would take "
                         f"({total / 2 / 1e9:.2f} GB), or the keys without the values")
        return check

    def prefill_32k(self) -> Check:
        check = Check("a 32k-token prefill on one H100: about 800 ms")
        tokens = 32768
        seconds = prefill_seconds(LESSON, tokens)
        model, gpu = lookup(LESSON)
        floor = 2 * model.num_linear_params * tokens / (gpu.fp8_tflops * 1e12)
        check.findings.append(f"one H100: {seconds * 1000:,.0f} ms; even at 100% of the FP8 peak "
                              f"the linear layers alone take {floor * 1000:,.0f} ms")
        holds = next((c for c in ELSEWHERE if in_band(prefill_seconds(c, tokens), 0, 0.8)), None)
        shown = holds or ELSEWHERE[-1]
        check.findings.append(f"{hardware_name(shown)}: "
                              f"{prefill_seconds(shown, tokens) * 1000:,.0f} ms")
        flops = 2 * model.num_linear_params * tokens
        check.verdict = (f"cannot hold on one H100 (compute peak): 2 x "
                         f"{model.num_linear_params / 1e9:.1f} B linear params x {tokens:,} tokens "
                         f"is {flops / 1e15:.1f} PFLOP"
                         + (f"; holds on {hardware_name(holds)}" if holds else
                            f"; not even on {hardware_name(shown)}"))
        return check

    # -- simulations --------------------------------------------------------------------------

    def throughput_all_on(self) -> Check:
        check = Check("one H100, 128 concurrent requests, all three defaults on: 2,200-2,400 tok/s")
        check.findings.append(lesson_setup_refusal())
        result = self.run(H100_BEST, "chunked", "closed")
        plan = plan_memory(H100_BEST)
        model, _ = lookup(H100_BEST)
        needed = CONCURRENCY * (INPUT_LEN + OUTPUT_LEN) * model.kv_bytes_per_token("fp8")
        check.findings.append(
            f"one H100 at utilization 0.95 with FP8 KV: {plan.kv_cache_bytes / GIB:.2f} GiB of KV, "
            f"{result['mean_batch_size']:.0f} sequences per step, "
            f"{result['output_throughput']:,.0f} output tok/s")
        h200 = ELSEWHERE[0]  # the same Hopper compute with room for the KV
        check.findings.append(self._closed_loop_finding(h200))
        holds = next((c for c in ELSEWHERE
                      if in_band(self.run(c, "chunked", "closed")["output_throughput"], 2200, 2400)),
                     None)
        if holds is not None and holds is not h200:
            check.findings.append(self._closed_loop_finding(holds))
        elsewhere = (f"holds on {hardware_name(holds)}" if holds is not None
                     else f"not even on {hardware_name(ELSEWHERE[-1])}")
        check.verdict = (f"cannot hold on one H100 (memory capacity): 128 x 1,500 tokens need "
                         f"{needed / GIB:.1f} GiB of KV even in FP8, {plan.kv_cache_bytes / GIB:.1f} "
                         f"GiB is left after the weights; {elsewhere}")
        return check

    def _closed_loop_finding(self, config: EngineConfig) -> str:
        result = self.run(config, "chunked", "closed")
        return (f"{hardware_name(config)}: {result['mean_batch_size']:.0f} sequences per step, "
                f"{result['output_throughput']:,.0f} output tok/s")

    def throughput_unchunked(self) -> Check:
        check = Check("same, vLLM default without chunked prefill: about 1,800 tok/s "
                      "(chunking worth +25%)")
        gains = []
        for config in (H100_BEST, ELSEWHERE[0]):
            chunked = self.run(config, "chunked", "closed")["output_throughput"]
            whole = self.run(config, "continuous", "closed")["output_throughput"]
            gains.append(chunked / whole - 1)
            check.findings.append(f"{hardware_name(config)}: {whole:,.0f} tok/s unchunked, "
                                  f"{chunked:,.0f} chunked ({100 * gains[-1]:+.0f}%)")
        if max(abs(g) for g in gains) < 0.10:
            check.verdict = ("a 25% gap does not come from chunking itself: both modes compute the "
                             "same tokens, and servesim finds them within 10%; chunking protects "
                             "the ITL tail, as the lesson's own concept section says")
        else:
            check.verdict = (f"servesim finds chunking worth {100 * min(gains):+.0f}% to "
                             f"{100 * max(gains):+.0f}% at this load")
        return check

    def naive_loop(self) -> Check:
        check = Check("a naive PyTorch loop (one request at a time): about 600 tok/s")
        result = self.run(H100_BEST, "naive", "closed-few")
        model, gpu = lookup(H100_BEST)
        streamed = RooflineClock(H100_BEST).weight_bytes_per_step
        ceiling = gpu.memory_bandwidth_gbs * 1e9 / streamed
        check.findings.append(f"NAIVE on one H100: {result['output_throughput']:,.0f} tok/s; "
                              f"at 100% bandwidth the ceiling is {ceiling:,.0f} tok/s")
        check.verdict = (f"cannot hold one request at a time (bandwidth floor): every token "
                         f"re-reads {streamed / 1e9:.1f} GB of weights; 600 tok/s needs about "
                         f"{600 / ceiling:.0f} sequences sharing each read, i.e. batching")
        return check

    def kv_waste(self) -> Check:
        check = Check("KV waste under PagedAttention at production load: under 4%")
        paged = self.run(ELSEWHERE[0], "chunked", "closed")["kv_waste_pct"]
        contiguous = self.run(ELSEWHERE[0], "static", "closed")["kv_waste_pct"]
        check.findings.append(f"{hardware_name(ELSEWHERE[0])}, 128 concurrent: paged "
                              f"{paged:.1f}% vs contiguous max_model_len reservations "
                              f"{contiguous:.1f}%")
        check.verdict = ("holds" if paged < 4 else "does not hold") + (
            ": the only waste is the unfilled tail of each request's last 16-token block")
        return check

    def itl_tail(self) -> Check:
        check = Check("P99 ITL under mixed load: about 15 ms with chunked prefill, 50 ms without")
        floor = RooflineClock(LESSON).weight_bytes_per_step / (
            lookup(LESSON)[1].memory_bandwidth_gbs * 1e9)
        mixed_h100 = replace(H100_BEST, max_model_len=8192)
        chunked = self.run(mixed_h100, "chunked", "mixed")["p99_itl_ms"]
        whole = self.run(mixed_h100, "continuous", "mixed")["p99_itl_ms"]
        check.findings.append(f"one H100 (utilization 0.95, FP8 KV), the default mixed workload: "
                              f"{chunked:,.0f} ms chunked, {whole:,.0f} ms unchunked")
        holds = next((c for c in ELSEWHERE
                      if in_band(self.run(c, "chunked", "mixed")["p99_itl_ms"], 0, 15)), None)
        shown = holds or ELSEWHERE[-1]
        check.findings.append(f"{hardware_name(shown)}: "
                              f"{self.run(shown, 'chunked', 'mixed')['p99_itl_ms']:,.1f} ms chunked, "
                              f"{self.run(shown, 'continuous', 'mixed')['p99_itl_ms']:,.0f} ms "
                              "unchunked")
        check.verdict = (f"cannot hold on one H100 (bandwidth floor): every decode step streams "
                         f"the weights, {floor * 1000:.1f} ms at full bandwidth; "
                         + (f"holds on {hardware_name(holds)}" if holds else
                            f"not even on {hardware_name(shown)} (fixed costs): "
                            + unsplit_costs(shown)))
        return check

    # -- what a vLLM version accepts ----------------------------------------------------------

    def draft_model_with_chunked_prefill(self) -> Check:
        check = Check("vLLM v0.18.0 cannot combine --enable-chunked-prefill with draft-model "
                      "speculative decoding (--speculative-model); N-gram GPU speculation in the "
                      "V1 scheduler is the one exception")
        plain = ELSEWHERE[0]  # the lesson's model where it fits, with room for a drafter
        drafting = replace(plain, speculative_config=parse_speculative_config(
            f'{{"model": "{DRAFT_MODEL}", "num_speculative_tokens": {NUM_DRAFTS}}}'))
        served = self.run(drafting, "chunked", "mixed")
        without = self.run(plain, "chunked", "mixed")
        whole = self.run(drafting, "continuous", "mixed")
        check.findings.append(
            f"{hardware_name(plain)}, the default mixed workload, chunked prefill on, draft model "
            f"{DRAFT_MODEL}, k = {NUM_DRAFTS}: all {served['completed']} requests served, mean "
            f"TPOT {served['mean_tpot_ms']:.1f} ms ({without['mean_tpot_ms']:.1f} without "
            f"speculation), acceptance length {served['spec_decode_mean_acceptance_length']:.2f}, "
            f"P99 ITL {served['p99_itl_ms']:,.0f} ms ({whole['p99_itl_ms']:,.0f} with chunked "
            f"prefill off)")
        budget = self.knobs.max_num_batched_tokens
        check.findings.append(
            f"its token budget: {budget}, one token less per scheduled request for the draft "
            f"model's extra input (vLLM 0.30.0); v0.18.0 takes max_num_seqs off it up front "
            f"({budget} - {self.knobs.max_num_seqs} = {budget - self.knobs.max_num_seqs})")
        check.findings.append(removed_speculative_flags(DRAFT_MODEL, NUM_DRAFTS))
        check.findings.append(
            "NGram GPU (ngram_gpu, new in v0.18.0) is the exception to another rule: an explicit "
            "--async-scheduling is refused unless the method is EAGLE, MTP, a draft model or "
            "NGram GPU")
        *history, (latest, _, latest_does) = CHUNKED_PREFILL_WITH_A_DRAFT_MODEL
        runs = served["completed"] == without["completed"] > 0
        held = "; ".join(f"it held in {versions}, where {does}"
                         for versions, refused, does in history if refused)
        since = "; ".join(f"in {versions} {does}" for versions, refused, does in history
                          if not refused)
        check.verdict = (f"does not hold in v0.18.0: in {latest} {latest_does}"
                         + (", and servesim runs it" if runs else ", though servesim could not")
                         + f"; {held}; {since}")
        return check


    def ttft_tail(self) -> Check:
        """Objective 3's hint against the concept section: whose TTFT tail does chunking
        protect? Short and long prompts apart, on the default workload and where short requests
        arrive just behind a long prompt; then with a long prompt's chunk capped."""
        check = Check("chunked prefill protects the TTFT tail, not mean throughput (objective "
                      "3; the concept section: P99 ITL)")
        h200 = ELSEWHERE[0]
        capped = replace(h200, long_prefill_token_threshold=LONG_PREFILL_CAP)
        tails = {}
        for workload_name, what in (("mixed", "the default mixed workload"),
                                    ("behind-long", BEHIND_LONG_TEXT)):
            whole = self.ttft_tails(h200, "continuous", workload_name)
            chunked = self.ttft_tails(h200, "chunked", workload_name)
            tails[workload_name] = whole, chunked
            itl = [self.run(h200, mode, workload_name)["p99_itl_ms"]
                   for mode in ("continuous", "chunked")]
            check.findings.append(
                f"{hardware_name(h200)}, {what}, P99 TTFT unchunked -> chunked: short prompts "
                f"{whole[0]:,.0f} -> {chunked[0]:,.0f} ms, long ones {whole[1]:,.0f} -> "
                f"{chunked[1]:,.0f} ms; P99 ITL {itl[0]:,.0f} -> {itl[1]:,.0f} ms")
        short_capped, long_capped = self.ttft_tails(capped, "chunked", "behind-long")
        whole, chunked = tails["behind-long"]
        check.findings.append(
            f"the same with --long-prefill-token-threshold {LONG_PREFILL_CAP} (a long prompt's "
            f"share of each step capped): short prompts {short_capped:,.0f} ms, long "
            f"{long_capped:,.0f} ms")
        hurt = [name for name, (w, c) in tails.items() if c[0] > w[0]]
        if len(hurt) == len(tails):
            verdict = ("does not hold for chunking alone: it lengthens the TTFT tail of short "
                       "prompts in both (each prompt takes more, costlier steps, and a running "
                       "long prompt takes each step's budget before a waiting short one); it "
                       "protects the ITL tail, as the concept section says")
        else:
            verdict = (f"holds for short prompts {'only ' if hurt else ''}where chunking "
                       "shortened their TTFT tail")
        if short_capped < whole[0]:
            verdict += (f". What protects short requests' TTFT is capping a long prompt's chunk: "
                        f"{whole[0]:,.0f} -> {short_capped:,.0f} ms, paid by the long prompt "
                        f"({whole[1]:,.0f} -> {long_capped:,.0f} ms)")
        check.verdict = verdict
        return check

    def ttft_tails(self, config: EngineConfig, mode: str, workload_name: str) -> tuple:
        """P99 TTFT (ms) of the short prompts and of the long ones."""
        records = self.served(config, mode, workload_name).completed()
        short = [r.first_token_s - r.arrival_s for r in records if r.prompt_len < SHORT_PROMPT]
        long = [r.first_token_s - r.arrival_s for r in records if r.prompt_len >= SHORT_PROMPT]
        return 1000 * percentile(short, 99), 1000 * percentile(long, 99)


def unsplit_costs(config: EngineConfig) -> str:
    """How much of a step that carries one budget-sized chunk more GPUs would not take away."""
    clock = RooflineClock(config)
    chunk_tokens = config.token_budget(enable_chunked_prefill=True)
    step_s = prefill_seconds(config, chunk_tokens)
    unsplit_s = clock.fixed_s + chunk_tokens * clock.all_reduce_s_per_token
    return (f"a step with a {chunk_tokens}-token chunk takes {step_s * 1000:.0f} ms "
            f"there, {unsplit_s * 1000:.0f} ms of it per-layer fixed costs and all-reduces, which "
            "more GPUs do not split")


def in_band(value: float, low: float, high: float) -> bool:
    """Within the claimed range, give or take 10%: servesim is a model, not a measurement."""
    return 0.9 * low <= value <= 1.1 * high


def prefill_seconds(config: EngineConfig, num_tokens: int) -> float:
    """One step that prefills a single `num_tokens` prompt, priced on the roofline clock."""
    pairs = num_tokens * (num_tokens + 1) // 2
    return RooflineClock(config).price(num_tokens, 1, pairs, 0)


def lesson_setup_refusal() -> str:
    try:
        plan = plan_memory(LESSON)
    except ConfigError as refusal:
        return f"at vLLM's defaults (utilization 0.9, 16-bit KV) vLLM would refuse to start: {refusal}"
    return f"at vLLM's defaults: {plan.kv_cache_tokens:,} tokens of KV"


SHORT_PROMPT = 2000      # a prompt shorter than this is chat-sized; longer, a document
LONG_PREFILL_CAP = 256   # --long-prefill-token-threshold for the TTFT check
BEHIND_LONG_TEXT = ("10 short prompts (300 tokens) arriving just behind a 7,800-token one while "
                    "16 requests decode")


def behind_long_workload() -> Workload:
    """16 requests decoding; at 1 s a 7,800-token prompt, then, 10 ms apart, 10 short ones."""
    rows = ([(0.0, 500, 300)] * 16 + [(1.0, 7800, 50)]
            + [(1.01 + 0.01 * i, 300, 100) for i in range(10)])

    def make_requests():
        return iter([Request(str(i), *row) for i, row in enumerate(rows)])

    return Workload("behind-long", BEHIND_LONG_TEXT, {"name": "behind-long"}, make_requests)


WORKLOADS = {
    # 128 clients, each sending its next request when the last one finished.
    "closed": lambda: random_workload(INPUT_LEN, OUTPUT_LEN, 0.0, num_prompts=2 * CONCURRENCY,
                                      max_concurrency=CONCURRENCY),
    # NAIVE serves one at a time whatever the concurrency: a few requests measure its rate.
    "closed-few": lambda: random_workload(INPUT_LEN, OUTPUT_LEN, 0.0, num_prompts=8,
                                          max_concurrency=CONCURRENCY),
    "mixed": lambda: mixed_workload(),
    "behind-long": behind_long_workload,
}


def report_lines(checks: list[Check]) -> list[str]:
    lines = ["servesim lesson-check: Llama-3.3-70B FP8, the lesson's numbers against physics and "
             "simulation",
             f"(requests of {INPUT_LEN:,} prompt + {OUTPUT_LEN:,} output tokens from {CONCURRENCY} "
             "closed-loop clients unless a check says otherwise)", ""]
    for number, check in enumerate(checks, start=1):
        lines.append(textwrap.fill(f"{number}. claim: {check.claim}", width=100,
                                   subsequent_indent=" " * 10))
        lines += [_wrapped(f"   servesim: {finding}") for finding in check.findings]
        lines.append(_wrapped(f"   verdict: {check.verdict}"))
        lines.append("")
    return lines[:-1]


def _wrapped(line: str) -> str:
    return textwrap.fill(line, width=100, subsequent_indent=" " * 13)


def add_parser(subparsers, knobs: Knobs) -> None:
    parser = subparsers.add_parser(
        "lesson-check", help="the lesson's numbers against physics and simulation",
        description="For each number the lesson asks you to remember: the claim, what servesim "
                    "computes or simulates under the lesson's setup (Llama-3.3-70B FP8 on one "
                    "H100 SXM5) and on hardware where it would hold, and a verdict naming the "
                    "limit that decides it (memory capacity, bandwidth floor, compute peak, fixed "
                    "costs); for the claim about what vLLM v0.18.0 accepts, what each version's "
                    "code does, beside servesim serving it.")
    parser.set_defaults(command=run_lesson_check)


def run_lesson_check(args, context) -> str:
    return "\n".join(report_lines(LessonCheck(context.simulate, context.knobs).checks()))
