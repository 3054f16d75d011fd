"""A prefix cache left warm by the run before (commands/warm_cache.py): every prompt's full
blocks found again, the earliest evicted first when the pool cannot hold them all."""

import random

from commands.warm_cache import WarmPrefixCache, resent, warm
from config import EngineConfig
from kv_cache import PagedKVCache
from modes import MODES
from workload import random_workload

BLOCK = 16


def prompts(num_prompts=4, prompt_len=100):
    return resent(random_workload(prompt_len, 10, 0.0, num_prompts=num_prompts,
                                  request_rate=1.0))


def cached_blocks(kv_cache, workload) -> list[int]:
    return [len(kv_cache.find_cached_prefix(request)) for request in workload.make_requests()]


def test_every_prompt_of_the_set_is_found_again_but_the_last_token_computed():
    workload = prompts()
    kv_cache = PagedKVCache(100, BLOCK, enable_prefix_caching=True)
    warm(kv_cache, workload.make_requests())
    assert cached_blocks(kv_cache, workload) == [99 // BLOCK] * 4  # 6 of 7 blocks each
    assert kv_cache.num_free_blocks == 100 and not kv_cache.block_tables


def test_a_pool_smaller_than_the_set_keeps_the_latest_prompts():
    workload = prompts(num_prompts=4)  # 7 blocks a prompt, 6 of them full
    kv_cache = PagedKVCache(14, BLOCK, enable_prefix_caching=True)
    warm(kv_cache, workload.make_requests())
    found = cached_blocks(kv_cache, workload)
    assert found == sorted(found) and found[0] < found[3] == 6  # the earliest evicted first
    assert sum(found) <= 14


def test_without_prefix_caching_nothing_is_left_and_prompts_not_resent_find_nothing():
    kv_cache = PagedKVCache(100, BLOCK, enable_prefix_caching=False)
    warm(kv_cache, prompts().make_requests())
    assert cached_blocks(kv_cache, prompts()) == [0] * 4
    kv_cache = PagedKVCache(100, BLOCK, enable_prefix_caching=True)
    warm(kv_cache, prompts().make_requests())
    unnamed = random_workload(100, 10, 0.0, num_prompts=4, request_rate=1.0)
    assert cached_blocks(kv_cache, unnamed) == [0] * 4  # their tokens are their own


def test_the_warm_mode_is_the_mode_but_for_its_first_pool():
    mode = MODES["chunked"]
    warmed = WarmPrefixCache(mode, prompts())
    assert warmed.name == mode.name and warmed.is_paged
    config = EngineConfig(model="llama-3.1-8b", gpu="h100-sxm5", async_scheduling=False)
    scheduler = warmed.make_scheduler(config, 200, random.Random(0))
    assert cached_blocks(scheduler.kv_cache, prompts()) == [6] * 4
