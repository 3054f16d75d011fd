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
from metrics import RunRecorder
from request import RequestStatus


class TokenTimes:
    """Observer: the virtual time of every output token, per request id."""

    def __init__(self):
        self.times_s: dict[str, list[float]] = defaultdict(list)

    def __call__(self, step: EngineStep) -> None:
        for request in step.result.sampled:
            self.times_s[request.request_id].append(request.last_token_s)

    def itls_s(self, request_id: str) -> list[float]:
        times_s = self.times_s.get(request_id, [])
        return [later - earlier for earlier, later in zip(times_s, times_s[1:])]


def detailed_lists(recorder: RunRecorder, token_times: TokenTimes) -> dict:
    """vLLM's per-request lists for one run, in arrival order."""
    lists = {key: [] for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies",
                                 "start_times", "errors")}
    for request in recorder.requests:
        done = request.status is RequestStatus.FINISHED
        lists["input_lens"].append(request.prompt_len)
        lists["output_lens"].append(request.num_output_tokens if done else 0)
        lists["ttfts"].append(request.first_token_s - request.arrival_s if done else 0.0)
        lists["itls"].append(token_times.itls_s(request.request_id))
        lists["latencies"].append(request.last_token_s - request.arrival_s if done else 0.0)
        lists["start_times"].append(request.arrival_s)
        lists["errors"].append(request.reject_reason or "")
    return lists
