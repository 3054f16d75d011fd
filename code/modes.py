"""The four modes the lesson compares, as small policy objects.

Each mode knows which scheduler and which KV allocator it runs with; the engine loop only ever
calls `make_scheduler` and never asks a mode's name.

    NAIVE               a static batch of one: one request at a time     contiguous KV
    STATIC              padded batches, drained before the next forms    contiguous KV
    CONTINUOUS          vLLM V1, chunked prefill off                     PagedAttention
    CONTINUOUS+CHUNKED  vLLM V1, chunked prefill on                      PagedAttention
"""

import random

from async_scheduling import AsyncScheduler
from config import ConfigError, EngineConfig, flag_name
from kv_cache import ContiguousKVCache, PagedKVCache
from bulk_scheduler import AsyncBulkScheduler, BulkScheduler, BulkStaticBatchScheduler
from scheduler import Scheduler
from spec_decode import NO_SPECULATION
from static_batching import StaticBatchScheduler


class StaticMode:
    """Batches formed by a size or a timeout and run to the end (NAIVE: size one, no timeout)."""
    is_paged = False  # contiguous max_model_len reservations, no blocks
    has_token_budget = False  # a padded batch computes every member's tokens, whatever a budget

    def __init__(self, name: str, summary: str, one_at_a_time: bool):
        self.name = name
        self.summary = summary
        self.one_at_a_time = one_at_a_time

    def check(self, config: EngineConfig, name=flag_name) -> None:
        """A padded batch ignores the token budget. Speculative decoding is a feature of vLLM
        V1's scheduler, which these modes predate: a table with NAIVE or STATIC beside a
        speculating mode would credit batching with what speculation did."""
        if config.speculative_config is not None:
            raise ConfigError(f"--speculative-config runs in vLLM V1's scheduler, the modes "
                              f"continuous and chunked; {self.name} predates it: choose --mode "
                              f"continuous,chunked (or one of them)")

    def caches_prefixes(self, config: EngineConfig) -> bool:
        """Contiguous reservations predate prefix caching: never."""
        return False

    def uses_async_scheduling(self, config: EngineConfig) -> bool:
        """servesim's own modes, which vLLM never ran: one step at a time, whatever
        --async-scheduling says."""
        return False

    def make_scheduler(self, config: EngineConfig, num_gpu_blocks: int,
                       acceptance_rng: random.Random, in_bulk: bool = False
                       ) -> StaticBatchScheduler:
        """`in_bulk`: the batch's decodes may be counted, not named (bulk_scheduler.py)."""
        kv_cache = ContiguousKVCache(num_gpu_blocks * config.block_size, config.max_model_len)
        scheduler_class = BulkStaticBatchScheduler if in_bulk else StaticBatchScheduler
        if self.one_at_a_time:
            return scheduler_class(kv_cache, max_batch_size=1, batching_window_s=0.0,
                                   max_model_len=config.max_model_len)
        return scheduler_class(kv_cache, max_batch_size=config.max_num_seqs,
                               batching_window_s=config.batching_window_ms / 1000,
                               max_model_len=config.max_model_len)


class ContinuousMode:
    """vLLM V1's iteration-level scheduler; chunked prefill is one flag of it."""
    is_paged = True  # PagedAttention blocks
    has_token_budget = True  # --max-num-batched-tokens bounds each step

    def __init__(self, name: str, summary: str, enable_chunked_prefill: bool):
        self.name = name
        self.summary = summary
        self.enable_chunked_prefill = enable_chunked_prefill

    def check(self, config: EngineConfig, name=flag_name) -> None:
        """vLLM's refusals of this mode's token budget; `name` as in EngineConfig.validate."""
        config.validate_scheduler(self.enable_chunked_prefill, name)

    def caches_prefixes(self, config: EngineConfig) -> bool:
        return config.enable_prefix_caching

    def uses_async_scheduling(self, config: EngineConfig) -> bool:
        """--async-scheduling (async_scheduling.py), except with n-gram drafts found on the
        CPU, for which vLLM 0.30.0 turns it off (vllm/config/vllm.py)."""
        speculative = config.speculative_config
        return config.async_scheduling and (speculative is None or speculative.method != "ngram")

    def make_scheduler(self, config: EngineConfig, num_gpu_blocks: int,
                       acceptance_rng: random.Random, in_bulk: bool = False,
                       scheduler_class=None) -> Scheduler:
        """`acceptance_rng` draws speculative decoding's accepted drafts (main.simulate).
        `in_bulk`: the running decodes may be counted as a group (bulk_scheduler.py; with
        async scheduling, only in runs of identical decode-only steps), unless decodes
        speculate (each advances by its own accepted drafts). `scheduler_class` may be
        a subclass of the synchronous Scheduler that watches its rules (reports/explain.py)."""
        speculative = config.speculative_config
        speculation = speculative.speculation(acceptance_rng) if speculative else NO_SPECULATION
        kv_cache = PagedKVCache(num_gpu_blocks, config.block_size, config.enable_prefix_caching,
                                drop_last_hit=speculative is not None and speculative.uses_eagle)
        if scheduler_class is None:
            in_bulk = in_bulk and not speculation.num_speculative_tokens
            if self.uses_async_scheduling(config):
                scheduler_class = AsyncBulkScheduler if in_bulk else AsyncScheduler
            else:
                scheduler_class = BulkScheduler if in_bulk else Scheduler
        return scheduler_class(kv_cache,
                               max_num_seqs=config.max_num_seqs,
                               max_num_batched_tokens=config.token_budget(
                                   self.enable_chunked_prefill),
                               max_model_len=config.max_model_len,
                               enable_chunked_prefill=self.enable_chunked_prefill,
                               long_prefill_token_threshold=config.long_prefill_token_threshold,
                               speculation=speculation)


MODES = {
    "naive": StaticMode("NAIVE", "one request at a time: whole prompt, then decode to the end",
                        one_at_a_time=True),
    "static": StaticMode("STATIC", "padded batches that run until their longest member is done",
                         one_at_a_time=False),
    "continuous": ContinuousMode("CONTINUOUS", "join and leave every step; prompts run whole",
                                 enable_chunked_prefill=False),
    "chunked": ContinuousMode("CONTINUOUS+CHUNKED", "join and leave every step; prompts sliced "
                              "into the token budget beside the decodes", enable_chunked_prefill=True),
}
