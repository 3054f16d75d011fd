"""A server whose prefix cache was warm: what `diagnose --observed` serves beside the cold run.

`vllm bench serve` draws its prompts from the same seed on every run, so a server benchmarked
more than once meets the prompts again in its prefix cache (vLLM V1 keeps a freed block's KV,
and its hash, until the block is handed out again): each prompt's first token then waits for
little more than its last block's compute. servesim's runs start cold. When the observed first
tokens came much sooner than simulated, diagnose serves the workload again as that server saw it:

  - the same prompts, each named as the token sequence it was the time before (`resent`), so
    that its full blocks hash as they did then;
  - a pool in which the run before left them: every prompt computed once, in the order it was
    sent, and freed, its full blocks cached at the back of the free queue, so that the earliest
    are evicted first when the pool cannot hold them all (`warm`).
"""

from dataclasses import replace

from request import Request, TokenContent, TokenRun
from workload import RESENT_PROMPT_SOURCE, Workload


def resent(workload: Workload) -> Workload:
    """The workload, its i-th prompt's tokens named (RESENT_PROMPT_SOURCE, i) past what they
    were known to be (a shared prefix, a trace's hash ids). The names tell apart the prompts of
    one set, which is all a warm run needs: the run before sent the same set."""
    def make_requests():
        for index, request in enumerate(workload.make_requests()):
            request.content = _named_prompt(request, index)
            yield request
    return replace(workload, make_requests=make_requests)


def _named_prompt(request: Request, index: int) -> TokenContent:
    runs = list(request.content.runs) if request.content is not None else []
    known = runs[-1].start + runs[-1].length if runs else 0
    if known < request.prompt_len:
        runs.append(TokenRun(known, request.prompt_len - known,
                             source=(RESENT_PROMPT_SOURCE, index)))
    return TokenContent(tuple(runs))


class WarmPrefixCache:
    """A mode whose scheduler starts with the prompts of `workload` left in its prefix cache;
    everything else is the mode's."""

    def __init__(self, mode, workload: Workload):
        self.mode = mode
        self.workload = workload

    def make_scheduler(self, config, num_gpu_blocks: int, acceptance_rng, in_bulk: bool = False):
        scheduler = self.mode.make_scheduler(config, num_gpu_blocks, acceptance_rng, in_bulk)
        warm(scheduler.kv_cache, self.workload.make_requests())
        return scheduler

    def __getattr__(self, name):  # name, check, caches_prefixes, ...: the mode's own
        return getattr(self.mode, name)


def warm(kv_cache, requests) -> None:
    """What the run before left in the pool: each prompt computed whole (reusing what an
    earlier one cached, as the scheduler would) and freed, in order. A prompt longer than the
    pool is skipped, as that run would have refused it."""
    if not getattr(kv_cache, "enable_prefix_caching", False):
        return
    for request in requests:
        earlier = Request(f"{request.request_id} (the run before)", 0.0, request.prompt_len, 1,
                          content=request.content)
        cached = kv_cache.find_cached_prefix(earlier)
        if not kv_cache.can_fit(earlier.request_id, request.prompt_len, cached):
            continue
        kv_cache.admit_cached(earlier, cached)
        num_cached = len(cached) * kv_cache.block_size
        kv_cache.allocate_slots(earlier, num_cached, request.prompt_len - num_cached)
        earlier.num_computed_tokens = request.prompt_len
        kv_cache.free(earlier)
