"""PutMetricData in batches, with a bounded buffer and backoff.

- Batches stay within PutMetricData's limits: at most 1,000 datums and about 1 MB per request.
- Throttling, 5xx and network errors keep the data and retry later with exponential backoff and full jitter,
  without blocking sampling. Requests CloudWatch will never accept (bad parameters) are dropped and logged.
- The buffer is bounded: when CloudWatch stays unreachable, the oldest datums go first and are counted, so
  memory never grows without bound.
"""

from __future__ import annotations

import json
import random
import time
from collections import deque
from collections.abc import Callable

from botocore.exceptions import BotoCoreError, ClientError

from monitoring.log import log

MAX_DATUMS_PER_REQUEST = 1000
MAX_REQUEST_BYTES = 1_000_000
_RETRYABLE_CODES = {
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "InternalFailure",
    "InternalServiceError",
    "InternalServiceFault",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeoutException",
    "ExpiredToken",
    "ExpiredTokenException",
}


def is_retryable(exc: Exception) -> bool:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return error.get("Code") in _RETRYABLE_CODES or status >= 500 or status == 429
    return isinstance(exc, BotoCoreError)  # connection refused, timeouts, missing credentials


def _size(datum: dict) -> int:
    # The query-string encoding CloudWatch receives is longer than JSON; twice the JSON size is a safe bound.
    return 2 * len(json.dumps(datum, default=str))


class Publisher:
    def __init__(
        self,
        client,
        namespace: str,
        max_buffered: int = 20_000,
        max_per_request: int = MAX_DATUMS_PER_REQUEST,
        backoff_base_s: float = 1.0,
        backoff_cap_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ):
        if not 1 <= max_per_request <= MAX_DATUMS_PER_REQUEST:
            raise ValueError(f"max_per_request must be 1..{MAX_DATUMS_PER_REQUEST}")
        self.client = client
        self.namespace = namespace
        self.buffer: deque[dict] = deque()
        self.max_buffered = max_buffered
        self.max_per_request = max_per_request
        self.backoff_base_s, self.backoff_cap_s = backoff_base_s, backoff_cap_s
        self.clock, self.jitter = clock, jitter
        self.dropped = 0  # since start: datums lost to the bound or rejected by CloudWatch
        self.dropped_reported = 0
        # Builds the datum that reports n drops. It rides on the next request that goes out, outside the
        # buffer, so the report of lost data can never be lost itself.
        self.drop_datum: Callable[[int], dict] | None = None
        self.failures = 0  # consecutive failed attempts
        self.next_attempt = 0.0
        self.published = 0

    def enqueue(self, datums: list[dict]) -> None:
        for datum in datums:
            if len(self.buffer) >= self.max_buffered:
                self.buffer.popleft()
                self.dropped += 1
            self.buffer.append(datum)

    def _next_batch(self, room: int) -> list[dict]:
        batch, size = [], 0
        for datum in self.buffer:
            datum_size = _size(datum)
            if batch and (len(batch) >= room or size + datum_size > MAX_REQUEST_BYTES - 4096):
                break
            batch.append(datum)
            size += datum_size
        return batch

    def backoff_delay(self) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2^(failures-1))]."""
        ceiling = min(self.backoff_cap_s, self.backoff_base_s * 2 ** max(self.failures - 1, 0))
        return self.jitter() * ceiling

    def flush(self, force: bool = False) -> int:
        """Send what the buffer holds, oldest first; return how many datums went out.

        Outside `force`, does nothing while a backoff is pending. Stops at the first retryable failure."""
        now = self.clock()
        if not force and now < self.next_attempt:
            return 0
        sent = 0
        while self.buffer:
            unreported = self.dropped - self.dropped_reported
            extra = [self.drop_datum(unreported)] if unreported and self.drop_datum else []
            batch = self._next_batch(self.max_per_request - len(extra))
            try:
                self.client.put_metric_data(Namespace=self.namespace, MetricData=batch + extra)
            except (ClientError, BotoCoreError) as exc:
                if not is_retryable(exc):
                    for _ in batch:
                        self.buffer.popleft()
                    self.dropped += len(batch)
                    log("publish_rejected", level="error", datums=len(batch), error=str(exc))
                    continue
                self.failures += 1
                delay = self.backoff_delay()
                self.next_attempt = now + delay
                log(
                    "publish_failed",
                    level="warning",
                    buffered=len(self.buffer),
                    retry_in_s=round(delay, 2),
                    failures=self.failures,
                    error=f"{type(exc).__name__}: {exc}",
                )
                return sent
            for _ in batch:
                self.buffer.popleft()
            sent += len(batch)
            self.dropped_reported += unreported if extra else 0
            self.failures = 0
        self.published += sent
        return sent
