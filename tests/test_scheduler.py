"""The V1 scheduler, step by step, against tables worked out by hand.

Each row of a table is one engine step: the tokens scheduled per request (running first, then
newly admitted), the requests preempted, and the free KV blocks after the step.
"""

from conftest import make_request, make_scheduler, run_steps
from batch import AdmissionLimit
from request import RequestStatus


def test_budget_is_split_between_running_decodes_and_a_prefill_chunk(bulk):
    # budget 10: A and B decode (1 token each), C's 20-token prompt takes what is left (8).
    scheduler = make_scheduler(bulk_decodes=bulk, budget=10, chunked=True)
    c = make_request("C", 20)
    rows = run_steps(scheduler, 5, {1: [make_request("A", 4), make_request("B", 4)], 2: [c]})
    assert [scheduled for scheduled, _, _ in rows] == [
        {"A": 4, "B": 4},
        {"A": 1, "B": 1, "C": 8},
        {"A": 1, "B": 1, "C": 8},
        {"A": 1, "B": 1, "C": 4},  # 8 + 8 + 4 = 20: C's prompt is done, its first token out
        {"A": 1, "B": 1, "C": 1},
    ]
    assert c.num_output_tokens == 2


def test_long_prefill_threshold_caps_a_prompt_per_step_with_chunking_on_or_off(bulk):
    for chunked in (True, False):
        scheduler = make_scheduler(bulk_decodes=bulk, budget=100, chunked=chunked, threshold=6)
        rows = run_steps(scheduler, 4, {1: [make_request("A", 15), make_request("B", 5)]})
        assert [scheduled for scheduled, _, _ in rows] == [
            {"A": 6, "B": 5},
            {"A": 6, "B": 1},
            {"A": 3, "B": 1},
            {"A": 1, "B": 1},
        ], f"chunked={chunked}"


def test_without_chunking_a_prompt_over_the_budget_blocks_everyone_behind_it(bulk):
    arrivals = {1: [make_request("A", 10), make_request("B", 8), make_request("C", 2)]}
    unchunked = run_steps(make_scheduler(bulk_decodes=bulk, budget=16, chunked=False), 2, arrivals)
    assert [s for s, _, _ in unchunked] == [
        {"A": 10},                   # B needs 8 > 6 left: it waits, and C (2) waits behind it
        {"A": 1, "B": 8, "C": 2},
    ]
    arrivals = {1: [make_request("A", 10), make_request("B", 8), make_request("C", 2)]}
    chunked = run_steps(make_scheduler(bulk_decodes=bulk, budget=16, chunked=True), 2, arrivals)
    assert [s for s, _, _ in chunked] == [
        {"A": 10, "B": 6},           # B takes the 6 left as a chunk
        {"A": 1, "B": 2, "C": 2},
    ]


def test_admission_needs_free_blocks_for_the_whole_prompt_not_just_the_chunk(bulk):
    # 5 blocks of 4 tokens. A (12 tokens = 3 blocks) is admitted with 8 tokens (2 blocks).
    # In step 2 B's first chunk would need 1 block and 2 are free, but its whole 12-token prompt
    # needs 3: B waits until A finishes and returns its blocks.
    scheduler = make_scheduler(bulk_decodes=bulk, num_blocks=5, block_size=4, budget=8, chunked=True)
    rows = run_steps(scheduler, 5, {1: [make_request("A", 12, max_tokens=3), make_request("B", 12)]})
    assert rows == [
        ({"A": 8}, [], 3),
        ({"A": 4}, [], 2),   # A's prompt done: first token, 13 tokens now
        ({"A": 1}, [], 1),   # the 13th token crosses into a 4th block
        ({"A": 1}, [], 5),   # A's third output: finished, all 4 blocks back in the pool
        ({"B": 8}, [], 3),
    ]


def test_preemption_takes_the_last_running_request_which_resumes_by_recomputing_its_outputs(bulk):
    # 4 blocks of 4 tokens; A and B each hold 2. When A's 9th token needs a 3rd block, B (the
    # most recently admitted) is preempted. Nobody is admitted in that step, not even C, which
    # would fit. B comes back at the front of WAITING and recomputes prompt + 3 outputs = 9.
    scheduler = make_scheduler(bulk_decodes=bulk, num_blocks=4, block_size=4, budget=100, chunked=True)
    b = make_request("B", 6, max_tokens=10)
    arrivals = {1: [make_request("A", 6, max_tokens=4), b], 4: [make_request("C", 2, max_tokens=1)]}
    rows = run_steps(scheduler, 5, arrivals)
    assert rows == [
        ({"A": 6, "B": 6}, [], 0),
        ({"A": 1, "B": 1}, [], 0),
        ({"A": 1, "B": 1}, [], 0),
        ({"A": 1}, ["B"], 4),        # A finishes here (4 outputs) and frees its 3 blocks
        ({"B": 9, "C": 2}, [], 1),   # C finishes in one step and frees its block
    ]
    assert b.num_preemptions == 1
    assert b.num_output_tokens == 4  # the 3 kept through preemption + 1 after resuming


def test_a_request_that_must_preempt_itself_ends_the_running_loop(bulk):
    scheduler = make_scheduler(bulk_decodes=bulk, num_blocks=2, block_size=4, budget=100, chunked=True)
    rows = run_steps(scheduler, 2, {1: [make_request("A", 3), make_request("B", 4)]})
    assert rows == [
        ({"A": 3, "B": 4}, [], 0),
        ({"A": 1}, ["B"], 1),  # B's 5th token needs a block; B is the last running: itself
    ]
    assert scheduler.waiting[0].request_id == "B"


def test_output_is_capped_at_max_model_len(bulk):
    scheduler = make_scheduler(bulk_decodes=bulk, max_model_len=10)
    a = make_request("A", 8, max_tokens=5)
    rows = run_steps(scheduler, 2, {1: [a]})
    assert [s for s, _, _ in rows] == [{"A": 8}, {"A": 1}]
    assert a.status is RequestStatus.FINISHED
    assert a.num_output_tokens == 2  # 8 + 2 = max_model_len, though it asked for 5


def test_prompt_of_max_model_len_or_more_is_rejected_on_arrival_with_a_reason(bulk):
    scheduler = make_scheduler(bulk_decodes=bulk, max_model_len=10)
    too_long, fits = make_request("A", 10), make_request("B", 9)
    scheduler.add_request(too_long)
    scheduler.add_request(fits)
    assert too_long.status is RequestStatus.REJECTED
    assert "max_model_len 10" in too_long.reject_reason
    assert list(scheduler.waiting) == [fits]


def test_max_num_seqs_caps_the_running_list(bulk):
    scheduler = make_scheduler(bulk_decodes=bulk, max_num_seqs=2)
    rows = run_steps(scheduler, 2, {1: [make_request(i, 4) for i in "ABC"]})
    assert [s for s, _, _ in rows] == [{"A": 4, "B": 4}, {"A": 1, "B": 1}]


def admission_limits(scheduler, num_steps, arrivals):
    """What each step says kept the head of WAITING out (None: nobody was left waiting)."""
    limits = []
    for number in range(1, num_steps + 1):
        for request in arrivals.get(number, []):
            scheduler.add_request(request)
        output = scheduler.schedule(0.0)
        scheduler.update_from_output(output, 0.0)
        limits.append(output.admission_limit)
    return limits


def test_each_step_says_what_kept_the_head_of_waiting_out(bulk):
    """The scenarios above, step by step: what stopped admission, for `diagnose`."""
    blocks, seqs, budget = (AdmissionLimit.KV_BLOCKS, AdmissionLimit.MAX_NUM_SEQS,
                            AdmissionLimit.TOKEN_BUDGET)

    def abc():
        return {1: [make_request("A", 10), make_request("B", 8), make_request("C", 2)]}

    # Without chunking B's whole 8 tokens do not fit the 6 left; with it, C finds the budget spent.
    assert admission_limits(make_scheduler(bulk_decodes=bulk, budget=16, chunked=False), 2,
                            abc()) == [budget, None]
    assert admission_limits(make_scheduler(bulk_decodes=bulk, budget=16, chunked=True), 2,
                            abc()) == [budget, None]
    # A's first chunk spends the budget; then B's whole prompt needs 3 blocks while A holds
    # them, until A finishes in step 4.
    scheduler = make_scheduler(bulk_decodes=bulk, num_blocks=5, block_size=4, budget=8)
    assert admission_limits(scheduler, 5, {1: [make_request("A", 12, max_tokens=3),
                                               make_request("B", 12)]}) == [
        budget, blocks, blocks, blocks, None]
    # Step 4 preempts B: C, which would fit, is not admitted in that step.
    scheduler = make_scheduler(bulk_decodes=bulk, num_blocks=4, block_size=4, budget=100)
    assert admission_limits(scheduler, 5, {
        1: [make_request("A", 6, max_tokens=4), make_request("B", 6, max_tokens=10)],
        4: [make_request("C", 2, max_tokens=1)]}) == [None, None, None, blocks, None]
    # Two run, the third waits for a seat.
    scheduler = make_scheduler(bulk_decodes=bulk, max_num_seqs=2)
    assert admission_limits(scheduler, 2, {1: [make_request(i, 4) for i in "ABC"]}) == [seqs,
                                                                                       seqs]
