"""HTTP to the hanzo-ml API: JSON calls and streamed uploads with a bearer token, retried like the mlflow client.

Connection errors, 408, 429 and 5xx are retried with exponential backoff (honouring Retry-After); every other
error is raised at once as `TrackingError`, carrying the server's `error_code` and `message`. Every write the
client makes is idempotent on the server (a replayed metric point, the same parameter value, the same status),
so a retried request that had in fact arrived is harmless.
"""
from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable

log = logging.getLogger("hanzo_ml.tracking")

RETRYABLE_STATUS = {408, 429, 500, 502, 503, 504}
MAX_RETRY_AFTER_S = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    request_timeout_s: float = 10.0


class TrackingError(Exception):
    """A call the server refused (4xx), or one that kept failing until the retries ran out.

    `status` is the HTTP status (0: the server could not be reached), `error_code` and `message` come from the
    server's error body ({error_code, message, request_id})."""

    def __init__(self, status: int, error_code: str, message: str, *, method: str, url: str,
                 request_id: str | None = None, attempts: int = 1, retry_after: float | None = None):
        self.status = status
        self.error_code = error_code
        self.message = message
        self.method = method
        self.url = url
        self.request_id = request_id
        self.attempts = attempts
        self.retry_after = retry_after
        where = f"{method} {url}"
        tried = f" after {attempts} attempt(s)" if attempts > 1 else ""
        super().__init__(f"{error_code}: {message} ({where}: HTTP {status}{tried})" if status
                         else f"{error_code}: {message} ({where}{tried})")

    @property
    def retryable(self) -> bool:
        return self.status == 0 or self.status in RETRYABLE_STATUS


@dataclass
class Upload:
    """A request body read from a file, opened afresh for every attempt and streamed, never held in memory."""
    open: Callable[[], BinaryIO]
    size: int
    content_type: str = "application/octet-stream"


class Transport:
    """Calls one hanzo-ml API (`base_uri`) with `Authorization: Bearer <token>` when a token is set."""

    def __init__(self, base_uri: str, token: str | None = None, retry: RetryPolicy = RetryPolicy()):
        parsed = urllib.parse.urlparse(base_uri)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"tracking URI: expected http(s)://host[:port], got {base_uri!r}")
        self.base_uri = base_uri.rstrip("/")
        self.token = token
        self.retry = retry

    def url(self, path: str, query: dict[str, str] | None = None) -> str:
        return self.base_uri + path + ("?" + urllib.parse.urlencode(query) if query else "")

    def call(self, method: str, path: str, body: Any = None, *, query: dict[str, str] | None = None,
             upload: Upload | None = None, retry: RetryPolicy | None = None) -> Any:
        """One API call, retried on connection errors, 408, 429 and 5xx; the decoded JSON answer."""
        policy = retry or self.retry
        url = self.url(path, query)
        delay = policy.initial_backoff_s
        for attempt in range(1, policy.attempts + 1):
            try:
                return self._attempt(method, url, body, upload, policy.request_timeout_s)
            except TrackingError as e:
                if not e.retryable or attempt == policy.attempts:
                    raise TrackingError(e.status, e.error_code, e.message, method=method, url=url,
                                        request_id=e.request_id, attempts=attempt) from None
                log.info("%s %s: %s, retrying", method, url, e.message)
                # The server's Retry-After wins over our own backoff (within reason).
                time.sleep(min(MAX_RETRY_AFTER_S, max(min(delay, policy.max_backoff_s), e.retry_after or 0.0)))
                delay *= 2
        raise AssertionError("unreachable: the last attempt raises")

    def _attempt(self, method: str, url: str, body: Any, upload: Upload | None, timeout_s: float) -> Any:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        stream = None
        if upload is not None:
            stream = upload.open()
            data: Any = stream
            headers["Content-Type"] = upload.content_type
            headers["Content-Length"] = str(upload.size)
        elif body is not None:
            data = json.dumps(body, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        else:
            data = None
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read()
            return json.loads(raw) if raw else {}
        except urllib.error.HTTPError as e:
            raise http_error(e, method, url) from None
        except (urllib.error.URLError, OSError) as e:  # refused, reset, DNS, timeout
            raise TrackingError(0, "UNAVAILABLE", f"cannot reach the tracking server ({getattr(e, 'reason', e)})",
                                method=method, url=url) from None
        finally:
            if stream is not None:
                stream.close()


def http_error(e: urllib.error.HTTPError, method: str, url: str) -> TrackingError:
    """The server's {error_code, message, request_id}, or the raw text of a body that is not one."""
    text = e.read()[:2000].decode("utf-8", "replace")
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict) and "message" in payload:
        code, message, request_id = str(payload.get("error_code", "HTTP_ERROR")), str(payload["message"]), \
            payload.get("request_id")
    else:
        code, message, request_id = "HTTP_ERROR", text.strip()[:300] or e.reason, None
    return TrackingError(e.code, code, message, method=method, url=url, request_id=request_id,
                         retry_after=parse_retry_after(e.headers.get("Retry-After")))


def parse_retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
