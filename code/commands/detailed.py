"""`--save-detailed FILE`: every request's own numbers, as `vllm bench serve --save-detailed` keeps.

vLLM's result file then holds, beside the metrics, one entry per request sent, in sending order:

    input_lens    prompt tokens
    output_lens   output tokens received (0 for a failed request)
    ttfts         time to first token, s (0 for a failed request)
    itls          the request's own gaps between tokens, s: a list per request
    latencies     end-to-end latency, s (0 for a failed request)
    start_times   when the request was sent, s
    errors        "" or why it failed

servesim writes the same lists (a rejected request is vLLM's failed one), on the virtual clock,
and leaves out `generated_texts`: it generates no text. Collecting a gap per token costs memory
for every output token, so only a run that asks for the file attaches `TokenTimes`.
"""

from collections import defaultdict

from batch import EngineStep
from metrics import FINISHED, RunRecorder


class TokenTimes:
    """Observer: the virtual time of every output token, per request (by arrival order)."""
    needs_every_request = True  # it reads each request's token times, step by step

    def __init__(self):
        self.times_s: dict[int, list[float]] = defaultdict(list)

    def __call__(self, step: EngineStep) -> None:
        for request in step.result.sampled:
            self.times_s[request.arrival_index].append(request.last_token_s)

    def itls_s(self, index: int) -> list[float]:
        times_s = self.times_s.get(index, [])
        return [later - earlier for earlier, later in zip(times_s, times_s[1:])]


def detailed_lists(recorder: RunRecorder, token_times: TokenTimes) -> dict:
    """vLLM's per-request lists for one run, in arrival order."""
    lists = {key: [] for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies",
                                 "start_times", "errors")}
    errors = {rejection.index: rejection.reject_reason for rejection in recorder.rejections()}
    for index in range(len(recorder.status)):
        record = recorder.record(index)
        done = record.status == FINISHED
        lists["input_lens"].append(record.prompt_len)
        lists["output_lens"].append(record.num_output_tokens if done else 0)
        lists["ttfts"].append(record.first_token_s - record.arrival_s if done else 0.0)
        lists["itls"].append(token_times.itls_s(index))
        lists["latencies"].append(record.last_token_s - record.arrival_s if done else 0.0)
        lists["start_times"].append(record.arrival_s)
        lists["errors"].append(errors.get(index, ""))
    return lists
