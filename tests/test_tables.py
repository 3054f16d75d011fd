"""The lines under the table: computed from the numbers above them, and said only where true."""

import json
import re

from conftest import servesim_here
from goodput import CHAT_SLOS_MS
from reports.tables import surprise_lines

# Short outputs from prompts of very different lengths: the work is prompts, and STATIC pads them.
SHORT_OUTPUTS = ["--dataset-name", "random", "--random-input-len", "2000",
                 "--random-range-ratio", "0.9", "--random-output-len", "8", "--num-prompts", "40",
                 "--request-rate", "inf", "--mode", "naive,static"]


def numbers(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*\.?\d*", text)]


def compare(capsys, *argv) -> tuple[str, dict]:
    """The table's text and its JSON, by mode."""
    code, text, err = servesim_here(capsys, "compare", *argv)
    assert code == 0, err
    _, out, _ = servesim_here(capsys, "compare", *argv, "--format", "json")
    return text, {result["mode"]: result for result in json.loads(out)["results"]}


def takeaway(text: str, start: str) -> str:
    """The takeaway starting with `start`, unwrapped."""
    joined = text.replace("\n  ", " ")
    return next(line for line in joined.splitlines() if line.startswith(start))


def test_the_default_table_states_its_slo_and_chunking_has_the_best_goodput_under_it(capsys):
    text, results = compare(capsys)
    targets = " and ".join(f"{name.upper()} <= {ms:g} ms" for name, ms in CHAT_SLOS_MS.items())
    assert f"goodput: requests with {targets}, per second" in text
    goodputs = {mode: result["request_goodput"] for mode, result in results.items()}
    assert max(goodputs, key=goodputs.get) == "CONTINUOUS+CHUNKED"


def test_the_goodput_takeaway_says_what_chunking_wins_and_loses_with_the_tables_numbers(capsys):
    text, results = compare(capsys)
    line = takeaway(text, "- Chunking wins on goodput")
    chunked, whole = results["CONTINUOUS+CHUNKED"], results["CONTINUOUS"]
    assert f"goodput ({chunked['request_goodput']:.2f} vs {whole['request_goodput']:.2f}" in line
    won, lost = line.split("; loses on ")
    assert whole["output_throughput"] > chunked["output_throughput"] and "output tok/s" in lost
    assert whole["p99_itl_ms"] > chunked["p99_itl_ms"] and "P99 ITL" in won
    missed = line.split("met every SLO: ")[1]
    assert numbers(missed)[1:3] == [whole["missed_slos"]["ttft"], chunked["missed_slos"]["ttft"]]


def test_statics_loss_is_split_into_the_numbers_the_json_holds(capsys):
    text, results = compare(capsys)
    static = results["STATIC"]
    line = takeaway(text, "- Where STATIC loses")
    assert numbers(line) == [round(static["prefill_padding_pct"]), round(static["prompt_time_pct"]),
                             round(static["decode_padding_pct"]),
                             round(static["mean_idle_batch_slots"], 1)]
    queue = takeaway(text, "- Mean TTFT")
    assert f"{static['mean_queue_ms']:,.0f} ms of STATIC's is queueing" in queue


def test_naive_beating_static_is_explained_by_short_outputs_and_prompt_padding(capsys):
    text, results = compare(capsys, *SHORT_OUTPUTS)
    naive, static = results["NAIVE"], results["STATIC"]
    assert naive["output_throughput"] > static["output_throughput"]
    line = takeaway(text, "- NAIVE beats STATIC here")
    mean_output = static["total_output_tokens"] / static["completed"]
    assert f"({mean_output:,.0f} tokens on average)" in line
    assert f"{static['prefill_padding_pct']:.0f}% of its computed tokens were prompt padding" in line


def metrics(**values) -> dict:
    base = {"output_throughput": 100.0, "p99_itl_ms": 50.0, "decodes_beside_prompts_pct": 40.0,
            "prefill_padding_pct": 60.0, "prompt_time_pct": 70.0, "total_output_tokens": 800,
            "completed": 100, "decode_only_waiting_pct": 0.0, "num_recomputed_tokens": 0,
            "recomputed_pct": 0.0, "num_preemptions": 0}
    return {**base, **values}


def test_a_surprise_is_explained_only_where_it_happened():
    usual = {"NAIVE": metrics(output_throughput=20.0), "STATIC": metrics(p99_itl_ms=60.0),
             "CONTINUOUS": metrics(), "CONTINUOUS+CHUNKED": metrics(output_throughput=95.0)}
    assert surprise_lines(usual) == []
    surprising = {"NAIVE": metrics(output_throughput=20.0), "STATIC": metrics(
                      output_throughput=15.0, p99_itl_ms=30.0, decodes_beside_prompts_pct=0.0),
                  "CONTINUOUS": metrics(decode_only_waiting_pct=30.0),
                  "CONTINUOUS+CHUNKED": metrics(output_throughput=110.0,
                                                decode_only_waiting_pct=10.0)}
    lines = surprise_lines(surprising)
    assert [line.split(" ")[1] for line in lines] == ["NAIVE", "Chunking", "STATIC's"]
    assert "CONTINUOUS spent 30% of its time in decode-only steps" in lines[1]
    assert "preemptions" not in lines[1]  # neither mode recomputed anything
