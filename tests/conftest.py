"""Shared factories for servesim's tests: small requests, small caches, a run of the engine."""

import pytest

from request import Request


def make_request(request_id="0", arrival_s=0.0, prompt_len=32, max_tokens=4) -> Request:
    return Request(str(request_id), arrival_s, prompt_len, max_tokens)


@pytest.fixture
def request_factory():
    return make_request
