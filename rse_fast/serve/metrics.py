"""Prometheus-format metrics for the service: requests, latency, tokens by role, errors, and
the counters families declare of their runs (RSE: whether its experience reached a prompt,
as distillation no prompt showed bought nothing)."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import defaultdict
from itertools import accumulate

from rse_fast.methods.request_fields import RunCounter, RunReport
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
        #: per family counter, its runs by their flag and the tokens the "no" runs wasted
        self.runs: dict[RunCounter, dict[bool, int]] = {}
        self.wasted_tokens: dict[RunCounter, int] = {}
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

    def declare(self, counter: RunCounter) -> None:
        """Show a family's counter from the start (at zero), before any run reports to it."""
        with self._lock:
            self.runs.setdefault(counter, defaultdict(int))
            self.wasted_tokens.setdefault(counter, 0)

    def add_outcome(self, by_role: dict[str, int], report: RunReport | None) -> None:
        """A method request's tokens by role and, for a family that declares a counter, the
        run's flag and, when it is "no", the tokens of the counter's role it wasted."""
        self.add_tokens(by_role)
        if report is None:
            return
        self.declare(report.counter)
        with self._lock:
            self.runs[report.counter][report.flag] += 1
            if not report.flag:
                self.wasted_tokens[report.counter] += by_role.get(report.counter.wasted_role, 0)

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
            for counter, runs in self.runs.items():
                out += render_counter(counter, runs, self.wasted_tokens[counter])
            out += [
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


def render_counter(counter: RunCounter, runs: dict[bool, int], wasted: int) -> list[str]:
    """A family's counter in Prometheus's text format."""
    name, wasted_name = f"rse_fast_{counter.name}", f"rse_fast_{counter.wasted_name}"
    return [
        f"# HELP {name} {counter.help}",
        f"# TYPE {name} counter",
        *(f'{name}{{{counter.label}="{str(k).lower()}"}} {n}' for k, n in sorted(runs.items())),
        f"# HELP {wasted_name} {counter.wasted_help}",
        f"# TYPE {wasted_name} counter",
        f"{wasted_name} {wasted}",
    ]
