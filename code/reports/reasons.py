"""The sentences that explain a step: one `Rule` per decision of vLLM V1's scheduler, its
template and the vLLM 0.30.0 function that makes the same decision; a `Reason` is a rule applied
to one request with its numbers (explain.py decides which, and the numbers).

A sentence is its template with the numbers in (`fill`). The page (step_page.html) gets the
templates and each reason's numbers in the template's order, and fills them the same way, so
the terminal's `--explain` and the page say the same words.
"""

import re
from dataclasses import dataclass, field

VLLM_SOURCE = "https://github.com/vllm-project/vllm/blob/v0.30.0/"
SCHEDULER_PY = "vllm/v1/core/sched/scheduler.py"
KV_CACHE_MANAGER_PY = "vllm/v1/core/kv_cache_manager.py"


@dataclass(frozen=True)
class Rule:
    template: str   # the sentence, with {name} where a number goes
    vllm: str       # the vLLM 0.30.0 function that makes the same decision
    source: str     # its file, under VLLM_SOURCE

    @property
    def fields(self) -> list[str]:
        """The template's numbers, in the order they appear (the page stores them so)."""
        return re.findall(r"\{(\w+)\}", self.template)


RUNNING_LOOP = ("Scheduler.schedule (running loop)", SCHEDULER_PY)
WAITING_LOOP = ("Scheduler.schedule (waiting loop)", SCHEDULER_PY)
ALLOCATE = ("KVCacheManager.allocate_slots", KV_CACHE_MANAGER_PY)
PREEMPT = ("Scheduler._preempt_request", SCHEDULER_PY)
COMPUTED_BLOCKS = ("KVCacheManager.get_computed_blocks", KV_CACHE_MANAGER_PY)
UPDATE = ("Scheduler.update_from_output", SCHEDULER_PY)
ADD_REQUEST = ("Scheduler.add_request", SCHEDULER_PY)

RULES = {
    # -- the running loop: RUNNING in admission order, while budget is left ----------------------
    "decode": Rule("decode: 1 token ({budget} of the token budget left before it)", *RUNNING_LOOP),
    "decode_drafts": Rule("decode with {drafts} drafts to verify: {tokens} tokens ({budget} of "
                          "the token budget left before it)", *RUNNING_LOOP),
    "decode_drafts_cut": Rule("decode with {drafts} of its {proposed} drafts: {tokens} tokens, "
                              "all the budget left ({budget}) or max_model_len allows",
                              *RUNNING_LOOP),
    "rest": Rule("{tokens} tokens, all it had left to compute ({computed} of {total} were "
                 "computed; {budget} of the token budget left before it)", *RUNNING_LOOP),
    "chunk_budget": Rule("chunk of {tokens} of the {remaining} tokens it has left: what the "
                         "budget keeps after the {ahead} requests before it took {used}",
                         *RUNNING_LOOP),
    "chunk_threshold": Rule("chunk of {tokens} of the {remaining} tokens it has left: "
                            "long_prefill_token_threshold caps a request at {tokens} a step",
                            *RUNNING_LOOP),
    "chunk_max_model_len": Rule("{tokens} tokens: position {last} is the last max_model_len "
                                "{max_model_len} lets the model compute", *RUNNING_LOOP),
    "budget_spent": Rule("not scheduled: the token budget is spent ({used} of {budget} tokens "
                         "went to the requests before it)", *RUNNING_LOOP),
    "nothing_to_compute": Rule("not scheduled: it has no token to compute this step",
                               *RUNNING_LOOP),
    "after_self_preemption": Rule("not scheduled: request {request} before it preempted itself, "
                                  "which ends the running loop", *RUNNING_LOOP),
    "preempted": Rule("preempted (to be recomputed): the most recently admitted running request, "
                      "its {freed} blocks freed for request {request}, which needs {needed} new "
                      "blocks with {free} free", *PREEMPT),
    "preempted_self": Rule("preempted itself: it needs {needed} new blocks, {free} are free, and "
                           "nobody admitted after it is left to preempt", *PREEMPT),
    # -- the waiting loop: WAITING first come, first served, if nobody was preempted ------------
    "admitted": Rule("admitted: the pool can hold its {total} tokens ({free} blocks free); "
                     "{tokens} computed now in {blocks} new blocks, the budget had {budget} left",
                     *WAITING_LOOP),
    "admitted_chunk": Rule("admitted with a chunk of {tokens} of its {remaining} tokens to "
                           "compute: what the budget keeps after the requests before it took "
                           "{used} ({blocks} new blocks, {free} free)", *WAITING_LOOP),
    "admitted_threshold": Rule("admitted with a chunk of {tokens} of its {remaining} tokens to "
                               "compute: long_prefill_token_threshold caps a request at {tokens} "
                               "a step ({blocks} new blocks, {free} free)", *WAITING_LOOP),
    "wait_preemption": Rule("not admitted: request {request} was preempted this step, so nobody "
                            "is admitted (the pool ran out)", *WAITING_LOOP),
    "wait_budget": Rule("not admitted: the token budget is spent ({used} of {budget} tokens "
                        "scheduled)", *WAITING_LOOP),
    "wait_max_num_seqs": Rule("not admitted: {running} requests already run, max_num_seqs is "
                              "{max_num_seqs}", *WAITING_LOOP),
    "wait_whole_prompt": Rule("not admitted: its {tokens} tokens do not fit the {budget} tokens "
                              "of budget left, and without chunked prefill a prompt runs whole",
                              *WAITING_LOOP),
    "wait_blocks": Rule("not admitted: it needs {needed} blocks for its {total} tokens, {free} "
                        "are free", *ALLOCATE),
    "wait_blocks_cached": Rule("not admitted: it hit {hit} cached blocks, but its {total} tokens "
                               "still take {needed} free blocks ({free_hits} of the hits sit in "
                               "the free queue), {free} are free", *ALLOCATE),
    "wait_lookahead": Rule("not admitted: its chunk fits, but with the proposer's {lookahead} "
                           "lookahead slots it needs {needed} blocks, {free} are free", *ALLOCATE),
    "wait_behind": Rule("waits behind request {request}: first come, first served, nobody "
                        "overtakes the head of WAITING", *WAITING_LOOP),
    # -- events: what else happened to the request in the step ---------------------------------
    "arrived": Rule("arrived at {time_ms} ms and joined the back of WAITING", *ADD_REQUEST),
    "rejected": Rule("rejected on arrival: {reason}", *ADD_REQUEST),
    "hit": Rule("hit {hit} cached blocks ({tokens} tokens not computed again)", *COMPUTED_BLOCKS),
    "miss": Rule("looked up its {total} tokens in the prefix cache: no full block cached",
                 *COMPUTED_BLOCKS),
    "first_token": Rule("its prompt is computed: first token sampled, TTFT {ttft_ms} ms",
                        *UPDATE),
    "verified": Rule("verified {drafts} drafts: {accepted} accepted, {rejected} rejected and "
                     "taken back from its computed tokens", *UPDATE),
    "finished": Rule("finished with {outputs} output tokens (max_tokens {max_tokens}); its "
                     "{blocks} blocks go back to the pool", *UPDATE),
    "finished_cut": Rule("finished: its {total} tokens reach max_model_len {max_model_len}; its "
                         "{blocks} blocks go back to the pool", *UPDATE),
}


@dataclass(frozen=True)
class Reason:
    """One rule applied to one request in one step, with its numbers."""
    request_id: str
    rule: str
    numbers: dict = field(default_factory=dict)

    @property
    def sentence(self) -> str:
        return fill(RULES[self.rule].template, self.numbers)

    @property
    def values(self) -> list:
        """The numbers in the template's order."""
        return [self.numbers[name] for name in RULES[self.rule].fields]


def fill(template: str, numbers: dict) -> str:
    """The template with its numbers in (the page's JavaScript does exactly this)."""
    return re.sub(r"\{(\w+)\}", lambda match: str(numbers[match.group(1)]), template)
