"""Prometheus-format metrics for the service: requests, latency, tokens by role, errors, and
whether RSE's experience reached a prompt (distillation no prompt showed bought nothing)."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import defaultdict
from itertools import accumulate

from rse_fast.serve.auth import QueueStats

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.errors: dict[str, int] = defaultdict(int)
        self.tokens: dict[str, int] = defaultdict(int)
        self.latency_buckets = [0] * (len(BUCKETS) + 1)  # per bucket, the last over all
        self.latency_sum = 0.0
        self.latency_count = 0
        self.in_flight = 0
        self.passthrough_without_usage = 0
        self.rse_runs: dict[bool, int] = defaultdict(int)  # by whether a bank was shown
        self.rse_unshown_distill_tokens = 0
        self.queue = QueueStats()  # the gate's wait before the concurrency limits

    def observe(self, method: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, status)] += 1
            self.latency_sum += seconds
            self.latency_count += 1
            self.latency_buckets[bisect_left(BUCKETS, seconds)] += 1  # cumulated in render

    def error(self, kind: str) -> None:
        with self._lock:
            self.errors[kind] += 1

    def add_tokens(self, by_role: dict[str, int]) -> None:
        with self._lock:
            for role, n in by_role.items():
                self.tokens[role] += n

    def add_outcome(self, by_role: dict[str, int], bank_shown: bool | None) -> None:
        """A method request's tokens by role; for RSE, whether its bank reached a prompt and,
        when it did not, the distillation tokens that bought nothing."""
        self.add_tokens(by_role)
        if bank_shown is None:
            return
        with self._lock:
            self.rse_runs[bank_shown] += 1
            if not bank_shown:
                self.rse_unshown_distill_tokens += by_role.get("distill", 0)

    def add_passthrough(self, total_tokens: int | None) -> None:
        """A pass-through reply: its tokens when it reported usage (a streamed reply reports
        them only if its caller asked for the usage chunk), else one more uncounted reply."""
        with self._lock:
            if total_tokens is None:
                self.passthrough_without_usage += 1
            else:
                self.tokens["passthrough"] += total_tokens

    def render(self) -> str:
        with self._lock:
            out = [
                "# HELP rse_fast_requests_total Chat completion requests by method and status.",
                "# TYPE rse_fast_requests_total counter",
            ]
            out += [
                f'rse_fast_requests_total{{method="{m}",status="{s}"}} {n}'
                for (m, s), n in sorted(self.requests.items())
            ]
            out += [
                "# HELP rse_fast_request_seconds Request latency.",
                "# TYPE rse_fast_request_seconds histogram",
            ]
            out += [
                f'rse_fast_request_seconds_bucket{{le="{b}"}} {n}'
                for b, n in zip(BUCKETS, accumulate(self.latency_buckets), strict=False)
            ]
            out += [
                f'rse_fast_request_seconds_bucket{{le="+Inf"}} {self.latency_count}',
                f"rse_fast_request_seconds_sum {self.latency_sum:.6f}",
                f"rse_fast_request_seconds_count {self.latency_count}",
                "# HELP rse_fast_tokens_total Upstream tokens (prompt + completion) by role.",
                "# TYPE rse_fast_tokens_total counter",
            ]
            out += [
                f'rse_fast_tokens_total{{role="{r}"}} {n}' for r, n in sorted(self.tokens.items())
            ]
            out += [
                "# HELP rse_fast_errors_total Errors by type.",
                "# TYPE rse_fast_errors_total counter",
            ]
            out += [
                f'rse_fast_errors_total{{type="{k}"}} {n}' for k, n in sorted(self.errors.items())
            ]
            out += [
                "# HELP rse_fast_rse_runs_total RSE requests by whether a bank block reached "
                "any of their prompts.",
                "# TYPE rse_fast_rse_runs_total counter",
            ]
            out += [
                f'rse_fast_rse_runs_total{{bank_shown="{str(k).lower()}"}} {n}'
                for k, n in sorted(self.rse_runs.items())
            ]
            out += [
                "# HELP rse_fast_rse_unshown_distill_tokens_total Distillation tokens of RSE "
                "requests whose bank reached no prompt (compare with "
                'rse_fast_tokens_total{role="distill"}).',
                "# TYPE rse_fast_rse_unshown_distill_tokens_total counter",
                f"rse_fast_rse_unshown_distill_tokens_total {self.rse_unshown_distill_tokens}",
                "# HELP rse_fast_passthrough_without_usage_total Pass-through replies that "
                "reported no usage (streams whose caller did not ask for it).",
                "# TYPE rse_fast_passthrough_without_usage_total counter",
                f"rse_fast_passthrough_without_usage_total {self.passthrough_without_usage}",
                "# HELP rse_fast_queued_total Requests that waited for a concurrency slot.",
                "# TYPE rse_fast_queued_total counter",
                f"rse_fast_queued_total {self.queue.queued}",
                "# HELP rse_fast_queue_refused_total Requests refused with 429 after the wait "
                "ran out or with the queue full.",
                "# TYPE rse_fast_queue_refused_total counter",
                f"rse_fast_queue_refused_total {self.queue.timed_out}",
                "# HELP rse_fast_queue_wait_seconds_total Seconds requests waited for a slot.",
                "# TYPE rse_fast_queue_wait_seconds_total counter",
                f"rse_fast_queue_wait_seconds_total {self.queue.wait_s:.6f}",
                "# HELP rse_fast_queue_waiting Requests waiting for a slot now.",
                "# TYPE rse_fast_queue_waiting gauge",
                f"rse_fast_queue_waiting {self.queue.waiting}",
                "# HELP rse_fast_in_flight Requests being served.",
                "# TYPE rse_fast_in_flight gauge",
                f"rse_fast_in_flight {self.in_flight}",
            ]
        return "\n".join(out) + "\n"
