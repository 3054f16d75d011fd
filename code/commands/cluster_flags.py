"""Flags for many engines: `--data-parallel-size`, `--router`, `--pd`, `--kv-transfer-bandwidth`.

    --data-parallel-size N     vLLM's flag (flags.py defines it): N replicas of the engine, each
                               on its own GPUs (--tensor-parallel-size of them), behind one
                               router; with --enable-expert-parallel it is instead N attention
                               ranks inside one MoE engine (moe.py), as vLLM runs MoE DP
    --router NAME              round-robin (default), least-loaded, prefix-aware (router.py)
    --pd P:D                   P prefill engines and D decode engines (disaggregation.py).
                               vLLM spells it per instance, `--kv-transfer-config '{"kv_connector":
                               "NixlConnector", "kv_role": "kv_producer" | "kv_consumer"}'`, one
                               process each, with a proxy in front; one simulator runs both
                               pools, so one flag names their sizes (llm-d's and Dynamo's
                               deployments size prefill and decode pools the same way)
    --kv-transfer-bandwidth L  the link the KV moves over: nvlink, infiniband (default), pcie, or
                               GB/s per GPU each way

One replica and no --pd is today's engine, main.simulate itself: the output is unchanged.
"""

import argparse
from dataclasses import replace
from functools import partial

from cluster import ClusterSpec, simulate_cluster
from config import ConfigError
from disaggregation import DEFAULT_LINK, LINKS, PDSpec
from router import ROUTERS

MAX_ENGINES = 64  # a simulator's bound: enough for any sweep, small enough to stay quick


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("many engines (cluster.py)")
    group.add_argument("--router", default=None, choices=ROUTERS,
                       help="where an arriving request goes: round-robin (default); "
                            "least-loaded (vLLM's DP balancer: lowest waiting + running); "
                            "prefix-aware (llm-d's scorers: 3 x prefix cache hit + 2 x queue + "
                            "2 x free KV)")
    group.add_argument("--pd", default=None, metavar="P:D",
                       help="prefill/decode disaggregation: P prefill engines, D decode engines "
                            "(e.g. 1:1); the KV moves between them (continuous or chunked modes)")
    group.add_argument("--kv-transfer-bandwidth", default=None, metavar="LINK",
                       help=f"with --pd: the link for the KV: {', '.join(LINKS)} (default "
                            f"{DEFAULT_LINK}), or GB/s per GPU each way")


def replica_config(config, args: argparse.Namespace):
    """The config each engine runs: without expert parallelism, --data-parallel-size counts
    replicas, each an engine of data_parallel_size 1 (its own pool and clock). The engines of a
    cluster run vLLM's synchronous scheduler: cluster.py drives each one step at a time, and
    async scheduling across replicas is not modelled (asked for, it is refused)."""
    if config.enable_expert_parallel:
        return config
    if config.data_parallel_size > 1 or getattr(args, "pd", None):
        if getattr(args, "async_scheduling", None):
            raise ConfigError("--async-scheduling with --data-parallel-size or --pd: servesim "
                              "runs each replica's scheduler synchronously; leave the flag out")
        return replace(config, data_parallel_size=1, async_scheduling=False)
    return replace(config, data_parallel_size=1)


def cluster_simulate(args: argparse.Namespace, simulate, config, modes, plan):
    """main.simulate, or the cluster's loop over several engines when the flags ask for it."""
    spec = cluster_spec_from_args(args, config, modes, plan)
    if spec is None:
        return simulate
    if getattr(args, "block_table", None) is not None:
        raise ConfigError("--block-table draws one engine's block tables, and each replica has "
                          "its own physical blocks: leave out --data-parallel-size and --pd")
    return partial(simulate_cluster, spec)


def aggregated_twin(args: argparse.Namespace, engine):
    """With --pd P:D, the same engine as P + D aggregated replicas (chunked prefill does what
    disaggregation does, on as many GPUs): compare sets the two side by side. None without."""
    if getattr(args, "pd", None) is None:
        return None
    if getattr(args, "step_log", None) is not None:
        raise ConfigError("compare --pd serves two clusters, which one --step-log would mix: "
                          "write each with run (--pd P:D, then --data-parallel-size P+D)")
    num_prefill, num_decode = parse_pd(args.pd)
    spec = ClusterSpec(num_prefill + num_decode, router_name(args))
    return replace(engine, simulate=partial(simulate_cluster, spec))


def engine_labels(args: argparse.Namespace) -> tuple[str, str]:
    """How compare names the two sides: "x2" (aggregated replicas) and "1P:1D"."""
    num_prefill, num_decode = parse_pd(args.pd)
    return f"x{num_prefill + num_decode}", f"{num_prefill}P:{num_decode}D"


def cluster_spec_from_args(args, config, modes, plan):
    size = getattr(args, "data_parallel_size", 1)  # checked with the config (FIELD_RULES)
    if config.enable_expert_parallel:
        for flag in ("pd", "router", "kv_transfer_bandwidth"):
            if getattr(args, flag, None) is not None:
                raise ConfigError(f"--{flag.replace('_', '-')} routes between engines, and with "
                                  "--enable-expert-parallel --data-parallel-size counts attention "
                                  "ranks of one engine: leave one of them out")
        return None
    pd_text = getattr(args, "pd", None)
    if pd_text is None:
        if getattr(args, "kv_transfer_bandwidth", None) is not None:
            raise ConfigError("--kv-transfer-bandwidth sets the link between prefill and decode "
                              "engines: give it with --pd P:D")
        if size == 1:
            if getattr(args, "router", None) is not None:
                raise ConfigError(f"--router {args.router} picks among replicas: give "
                                  "--data-parallel-size N (N > 1) or --pd P:D")
            return None
        return ClusterSpec(size, router_name(args))
    if size != 1:
        raise ConfigError(f"--pd {pd_text} names every engine (P prefill + D decode); leave out "
                          f"--data-parallel-size {size}")
    num_prefill, num_decode = parse_pd(pd_text)
    for mode in modes:
        if not mode.is_paged:
            raise ConfigError(f"--pd moves KV blocks between engines, and {mode.name} has none "
                              "(it reserves max_model_len slots in one piece): use --mode "
                              "continuous or chunked")
    # A decode engine whose pool cannot hold one max_model_len request is refused before this,
    # as every engine's is (gpu_memory.plan_memory).
    bandwidth, latency_s, link = parse_bandwidth(args.kv_transfer_bandwidth)
    pd = PDSpec(num_prefill, num_decode, bandwidth, latency_s, link, plan.kv_bytes_per_token)
    return ClusterSpec(1, router_name(args), pd)


def router_name(args: argparse.Namespace) -> str:
    return args.router or "round-robin"


def parse_pd(text: str) -> tuple[int, int]:
    parts = text.split(":")
    try:
        num_prefill, num_decode = (int(part) for part in parts)
    except ValueError:
        raise ConfigError(f"--pd {text!r}: give P:D, prefill and decode engines, e.g. 1:1 or 3:1")
    if num_prefill < 1 or num_decode < 1 or num_prefill + num_decode > MAX_ENGINES:
        raise ConfigError(f"--pd {text}: at least one prefill and one decode engine, at most "
                          f"{MAX_ENGINES} in all")
    return num_prefill, num_decode


def parse_bandwidth(text) -> tuple[float, float, str]:
    if text is None:
        text = DEFAULT_LINK
    if text in LINKS:
        bandwidth, latency_s = LINKS[text]
        return bandwidth, latency_s, text
    try:
        bandwidth = float(text)
    except ValueError:
        bandwidth = float("nan")
    if not bandwidth > 0 or bandwidth == float("inf"):
        raise ConfigError(f"--kv-transfer-bandwidth {text!r}: give {', '.join(LINKS)} or a "
                          "positive number of GB/s")
    return bandwidth, LINKS[DEFAULT_LINK][1], "custom"
