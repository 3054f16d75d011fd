"""Shared factories for servesim's tests: small requests, small schedulers, a stepping driver,
and the command line, run as a learner runs it (a process) or in this one (faster).

Every command a test runs, in this process or in its own, checks the engine's invariants after
every step (commands/invariants.py): the variable is set here, for the whole session.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("SERVESIM_CHECK_INVARIANTS", "1")

from kv_cache import PagedKVCache  # noqa: E402
from request import Request  # noqa: E402
from scheduler import Scheduler  # noqa: E402
from spec_decode import NO_SPECULATION  # noqa: E402


@pytest.fixture(scope="session")
def fresh_clone(tmp_path_factory) -> Path:
    """The project copied where nothing is beside it, as a learner's fresh clone: the docs'
    commands run there (tests/test_readme.py, tests/test_readme_commands.py)."""
    from readme_blocks import copy_as_a_fresh_clone
    return copy_as_a_fresh_clone(tmp_path_factory.mktemp("clone"))


def make_request(request_id, prompt_len, max_tokens=100, arrival_s=0.0) -> Request:
    return Request(str(request_id), arrival_s, prompt_len, max_tokens)


@pytest.fixture(params=[True, False], ids=["bulk", "one-by-one"])
def bulk(request):
    """Each scenario twice: the running decodes counted in bulk, and every request by the rules."""
    return request.param


def make_scheduler(num_blocks=1000, block_size=16, budget=100, chunked=True, max_num_seqs=256,
                   max_model_len=1000, threshold=0, bulk_decodes=True,
                   speculation=NO_SPECULATION) -> Scheduler:
    scheduler = Scheduler(PagedKVCache(num_blocks, block_size), max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=budget, max_model_len=max_model_len,
                          enable_chunked_prefill=chunked, long_prefill_token_threshold=threshold,
                          speculation=speculation)
    scheduler.bulk_decodes = bulk_decodes and scheduler.bulk_decodes
    return scheduler


def step(scheduler, now_s=0.0):
    """One schedule + update; returns ({id: tokens}, [preempted ids], free blocks after).

    Decodes counted in bulk are the first `num_bulk_decodes` running requests, one token each.
    """
    output = scheduler.schedule(now_s)
    in_bulk = scheduler.running[:output.num_bulk_decodes]
    scheduler.update_from_output(output, now_s)
    scheduler.decodes.sync_all()  # so that a test reads the decodes' own counters
    scheduled = {request.request_id: 1 for request in in_bulk}
    scheduled.update({s.request.request_id: s.num_new_tokens for s in output.scheduled})
    preempted = [r.request_id for r in output.preempted]
    return scheduled, preempted, scheduler.num_free_blocks


def run_steps(scheduler, num_steps, arrivals=None):
    """Step `num_steps` times; `arrivals` maps a step number (1-based) to requests added before it."""
    rows = []
    for number in range(1, num_steps + 1):
        for request in (arrivals or {}).get(number, []):
            scheduler.add_request(request)
        rows.append(step(scheduler))
    return rows


class EveryRequest:
    """An observer that reads every request: the engine takes the plain rules, not the bulk path."""
    needs_every_request = True

    def __call__(self, step) -> None:
        pass


def make_workload(rows, max_concurrency=None):
    """A workload of (arrival_s, prompt_len, output_len) rows, ids "0", "1", ..."""
    from workload import Workload

    def make_requests():
        return iter([Request(str(i), a, p, o) for i, (a, p, o) in enumerate(rows)])

    return Workload("test", f"{len(rows)} test requests", {"name": "test"}, make_requests,
                    max_concurrency)


def servesim(*argv, cwd=None) -> subprocess.CompletedProcess:
    """`python3 code/main.py ARGV...` in a process of its own, as a learner runs it."""
    return subprocess.run([sys.executable, str(ROOT / "code" / "main.py"), *argv],
                          capture_output=True, text=True, cwd=cwd)


def servesim_here(capsys, *argv, knobs=None) -> tuple[int, str, str]:
    """The same command in this process (no start-up cost): (exit status, stdout, stderr).
    `knobs` replaces the knob block of code/main.py (default: as the file has them)."""
    import main
    from commands import cli
    code = cli.main(list(argv), main.simulate, knobs or main.knobs())
    captured = capsys.readouterr()
    return code, captured.out, captured.err
