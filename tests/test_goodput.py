"""Goodput as `vllm bench serve` counts it: requests meeting every SLO given, per second."""

import pytest

from config import ConfigError
from commands.flags import parse_goodput
from goodput import is_good, num_missed, request_goodput
from reports.tables import describe_slos
from request import Request


def served(request_id="0", arrival_s=0.0, first_token_s=1.0, last_token_s=2.0, num_output=11):
    """A finished request with hand-set token times (TTFT, TPOT and E2EL follow from them)."""
    request = Request(request_id, arrival_s, prompt_len=10, max_tokens=num_output)
    request.first_token_s, request.last_token_s = first_token_s, last_token_s
    request.num_output_tokens = num_output
    return request


def test_parse_goodput_reads_key_colon_milliseconds_pairs():
    assert parse_goodput(["ttft:2000", "tpot:50", "e2el:1e4"]) == {
        "ttft": 2000.0, "tpot": 50.0, "e2el": 10000.0}


@pytest.mark.parametrize("pair, names_in_message", [
    ("ttft=500", "KEY:MILLISECONDS"),
    ("ttft", "KEY:MILLISECONDS"),
    ("itl:50", "ttft, tpot, e2el"),
    ("ttft:-1", ">= 0"),
    ("ttft:fast", ">= 0"),
    ("ttft:nan", ">= 0"),
])
def test_parse_goodput_refuses_in_one_line_naming_what_is_valid(pair, names_in_message):
    with pytest.raises(ConfigError) as error:
        parse_goodput([pair])
    message = str(error.value)
    assert "\n" not in message and pair in message and names_in_message in message


def test_a_request_is_good_only_if_it_meets_every_slo_given():
    # TTFT 1 s, TPOT (2 - 1) / (11 - 1) = 100 ms, E2EL 2 s
    request = served()
    assert is_good(request, {"ttft": 1000, "tpot": 100, "e2el": 2000})  # met at equality
    assert not is_good(request, {"ttft": 1000, "tpot": 99})
    assert not is_good(request, {"e2el": 1999})
    assert is_good(request, {})  # no SLO: every request is good


def test_a_single_token_request_counts_a_tpot_of_zero_as_vllm_does():
    request = served(first_token_s=1.0, last_token_s=1.0, num_output=1)
    assert is_good(request, {"tpot": 0})


def test_request_goodput_is_good_requests_per_second_of_duration():
    fast = served("0", first_token_s=0.5, last_token_s=1.0)
    slow = served("1", first_token_s=3.0, last_token_s=4.0)
    assert request_goodput([fast, slow], {"ttft": 1000}, duration_s=4.0) == 0.25
    assert request_goodput([fast, slow], {"ttft": 1000}, duration_s=0.0) == 0.0


def test_describe_slos_names_each_target_with_its_unit():
    assert describe_slos({}) == []
    assert describe_slos({"ttft": 3000.0, "tpot": 50.0}) == [
        "goodput: requests with TTFT <= 3000 ms and TPOT <= 50 ms, per second"]


def test_each_slo_counts_the_requests_that_missed_it():
    fast = served("fast", first_token_s=0.5, last_token_s=1.5)                 # 0.5 s, 100 ms
    slow_start = served("slow", first_token_s=3.0, last_token_s=3.5, num_output=6)  # TPOT met
    stalled = served("stalled", first_token_s=2.5, last_token_s=5.5)          # 2.5 s, 300 ms
    assert num_missed([fast, slow_start, stalled], {"ttft": 2000, "tpot": 100}) == {
        "ttft": 2, "tpot": 1}
