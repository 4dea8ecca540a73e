"""An asyncio Schema Registry client: the Confluent REST API's few calls a serializer needs.

Serializers ask it only on a cache miss (a schema's first record per topic), so it keeps what it
learnt: the id of every (subject, schema) it registered or looked up, and nothing per record.
Each request is bounded by ``request.timeout.ms`` (connect, TLS, request and answer); a request
with no answer, or a 408/429/5xx, is tried again up to ``max.retries`` times after an
exponential wait of ``retries.wait.ms`` growing to ``retries.max.wait.ms`` (the Java and
confluent-kafka clients' names and defaults). So a registry that is down fails a call within
``(max.retries + 1) * request.timeout.ms`` plus the waits, with a ``SchemaRegistryError`` that
names the URL and those settings. An answer the registry gave (a 409 for an incompatible
schema, a 401, a 404) is final and raised at once with its ``error_code`` and message.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from aiokprod._waits import wait_within
from aiokprod.network.http import HttpError, HttpResponse, display_url, exchange
from aiokprod.schema_registry.errors import SchemaRegistryError
from aiokprod.schema_registry.schema import RegisteredSchema, Schema, SchemaReference

__all__ = ["SchemaRegistryClient"]

logger = logging.getLogger(__name__)

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_RETRIABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# a schema with its references is KiBs; an answer far larger is not a registry's
MAX_RESPONSE_BYTES = 16 << 20

# configuration names the client takes (confluent-kafka's and Java's, with or without the
# ``schema.registry.`` prefix Java's serializer configs use) -> the keyword they set
_OPTION_NAMES = {
    "url": "url",
    "basic.auth.user.info": "basic_auth_user_info",
    "bearer.auth.token": "bearer_token",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
    "request.timeout.ms": "request_timeout_ms",
    "max.retries": "max_retries",
    "retries.wait.ms": "retries_wait_ms",
    "retries.max.wait.ms": "retries_max_wait_ms",
}
# names that say how the credentials above are found: only the one source we take is accepted
_SOURCES = {"basic.auth.credentials.source": "USER_INFO",
            "bearer.auth.credentials.source": "STATIC_TOKEN"}


class SchemaRegistryClient:
    """Registers and looks up schemas in a Confluent-compatible Schema Registry.

    ``url`` may list several registries separated by commas; a request that gets no answer from
    one goes to the next. Credentials: ``basic_auth_user_info`` (``"user:password"``) or
    ``bearer_token``. TLS: an ``https://`` URL, verified against ``ssl_ca_location`` (else the
    system's CAs), with ``ssl_certificate_location``/``ssl_key_location`` for a client
    certificate, or a ready ``ssl_context``.
    """

    def __init__(
        self,
        url: str,
        *,
        basic_auth_user_info: str | None = None,
        bearer_token: str | None = None,
        ssl_ca_location: str | None = None,
        ssl_certificate_location: str | None = None,
        ssl_key_location: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        request_timeout_ms: int = 10_000,
        max_retries: int = 3,
        retries_wait_ms: int = 1_000,
        retries_max_wait_ms: int = 20_000,
    ) -> None:
        urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
        if not urls or any(not u.startswith(("http://", "https://")) for u in urls):
            raise ValueError(f"schema registry url must be http:// or https:// URLs: {url!r}")
        if basic_auth_user_info is not None and bearer_token is not None:
            raise ValueError("give basic.auth.user.info or bearer.auth.token, not both")
        if basic_auth_user_info is not None and ":" not in basic_auth_user_info:
            raise ValueError("basic.auth.user.info must be 'user:password'")
        for name, value in (("request.timeout.ms", request_timeout_ms),
                            ("retries.wait.ms", retries_wait_ms),
                            ("retries.max.wait.ms", retries_max_wait_ms)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if max_retries < 0:
            raise ValueError(f"max.retries must be >= 0, got {max_retries}")
        self._urls = urls
        self._headers = {"Accept": f"{_CONTENT_TYPE}, application/json",
                         "Content-Type": _CONTENT_TYPE}
        if basic_auth_user_info is not None:
            token = base64.b64encode(basic_auth_user_info.encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        elif bearer_token is not None:
            self._headers["Authorization"] = f"Bearer {bearer_token}"
        if ssl_context is None and any(u.startswith("https://") for u in urls):
            ssl_context = ssl.create_default_context(cafile=ssl_ca_location)
            if ssl_certificate_location is not None:
                ssl_context.load_cert_chain(ssl_certificate_location, ssl_key_location)
        self._ssl = ssl_context
        self._timeout_ms = request_timeout_ms
        self._max_retries = max_retries
        self._wait_ms = retries_wait_ms
        self._max_wait_ms = retries_max_wait_ms
        # (subject, schema text, type) -> id: what registration or look-up found
        self._ids: dict[tuple[str, str, str], int] = {}
        self.requests = 0  # requests sent, answered or not (tests show the cache is hit)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SchemaRegistryClient:
        """A client from confluent-kafka's ``SchemaRegistryClient`` configuration, or Java's
        (``schema.registry.url``, ``basic.auth.user.info``, ``schema.registry.ssl...``)."""
        kwargs: dict[str, Any] = {}
        for name, value in config.items():
            key = name[len("schema.registry."):] if name.startswith("schema.registry.") \
                else name
            if key in _SOURCES:
                if str(value).upper() != _SOURCES[key]:
                    raise ValueError(f"{name}={value!r} is not supported: only "
                                     f"{_SOURCES[key]}")
                continue
            if key == "timeout":  # confluent-kafka's, in seconds
                kwargs["request_timeout_ms"] = int(float(value) * 1000)
                continue
            keyword = _OPTION_NAMES.get(key)
            if keyword is None:
                raise ValueError(f"unknown schema registry client option {name!r}")
            kwargs[keyword] = int(value) if keyword.endswith(("_ms", "_retries")) else value
        if "url" not in kwargs:
            raise ValueError("schema registry configuration needs url (schema.registry.url)")
        return cls(**kwargs)

    async def register(self, subject: str, schema: Schema, *, normalize: bool = False) -> int:
        """Register ``schema`` under ``subject`` (or find it there) and return its global id."""
        key = (subject, schema.schema_str, schema.schema_type)
        known = self._ids.get(key)
        if known is not None:
            return known
        path = f"/subjects/{quote(subject, safe='')}/versions"
        if normalize:
            path += "?normalize=true"
        try:
            answer = await self._request("POST", path, schema.request_body())
        except SchemaRegistryError as refused:
            if refused.status != 409:
                raise
            # 409 is an incompatible schema, or (Apicurio) a subject another client created
            # between our look at it and our registration: asking for this schema tells which
            try:
                found = await self.lookup(subject, schema, normalize=normalize)
            except SchemaRegistryError:
                raise refused from None
            return found.schema_id
        schema_id = int(answer["id"])
        self._ids[key] = schema_id
        return schema_id

    async def lookup(self, subject: str, schema: Schema, *, normalize: bool = False
                     ) -> RegisteredSchema:
        """The version of ``subject`` that is ``schema``; a 404 ``SchemaRegistryError`` if the
        subject or the schema is not registered (``auto.register.schemas=false``)."""
        path = f"/subjects/{quote(subject, safe='')}"
        if normalize:
            path += "?normalize=true"
        answer = await self._request("POST", path, schema.request_body())
        found = self._registered(answer, subject)
        self._ids[(subject, schema.schema_str, schema.schema_type)] = found.schema_id
        return found

    async def latest_version(self, subject: str) -> RegisteredSchema:
        """The newest version of ``subject`` (``use.latest.version``)."""
        answer = await self._request(
            "GET", f"/subjects/{quote(subject, safe='')}/versions/latest", None)
        return self._registered(answer, subject)

    async def get_schema(self, schema_id: int) -> Schema:
        """The schema with the global id ``schema_id``."""
        answer = await self._request("GET", f"/schemas/ids/{schema_id}", None)
        return Schema(answer["schema"], answer.get("schemaType", "AVRO"),
                      tuple(SchemaReference(r["name"], r["subject"], int(r["version"]))
                            for r in answer.get("references") or ()))

    @staticmethod
    def _registered(answer: dict[str, Any], subject: str) -> RegisteredSchema:
        schema = Schema(answer.get("schema", ""), answer.get("schemaType", "AVRO"),
                        tuple(SchemaReference(r["name"], r["subject"], int(r["version"]))
                              for r in answer.get("references") or ()))
        version = answer.get("version")
        return RegisteredSchema(int(answer["id"]), answer.get("subject", subject),
                                None if version is None else int(version), schema)

    async def _exchange(self, method: str, url: str, payload: bytes | None) -> HttpResponse:
        """One exchange, bounded as a whole by ``request.timeout.ms`` (connecting, the TLS
        handshake, the request and the answer together)."""
        bound = self._timeout_ms / 1000
        try:
            return await wait_within(
                exchange(method, url, payload, self._headers, ssl_context=self._ssl,
                         connect_timeout_s=bound, read_timeout_s=bound,
                         max_response_bytes=MAX_RESPONSE_BYTES), bound)
        except asyncio.TimeoutError:
            raise HttpError("no answer in time", timed_out=True) from None

    async def _request(self, method: str, path: str, body: dict[str, Any] | None
                       ) -> dict[str, Any]:
        """One call: tried on each URL in turn, again after a backoff while nothing answers
        (or the answer says to retry); the registry's final answer raised at once."""
        payload = None if body is None else json.dumps(body).encode()
        attempts = self._max_retries + 1
        last = ""
        for attempt in range(attempts):
            url = self._urls[attempt % len(self._urls)]
            shown = display_url(url + path)
            self.requests += 1
            try:
                response = await self._exchange(method, url + path, payload)
            except HttpError as exc:
                if exc.tls or exc.too_large:  # the next attempt would get the same
                    raise SchemaRegistryError(f"schema registry {shown}: {exc}") from None
                last = f"no answer within request.timeout.ms={self._timeout_ms}" \
                    if exc.timed_out else str(exc)
            else:
                answer = _json_or_none(response.body)
                if 200 <= response.status < 300 and isinstance(answer, dict):
                    return answer
                message, code = _error_of(response.status, answer, response.body)
                if response.status not in _RETRIABLE_STATUSES:
                    raise SchemaRegistryError(
                        f"schema registry {shown} answered {response.status}"
                        f"{'' if code is None else f' (error_code {code})'}: {message}",
                        status=response.status, error_code=code)
                last = f"{response.status}: {message}"
            if attempt + 1 < attempts:
                wait = min(self._wait_ms * (2 ** attempt), self._max_wait_ms)
                wait_s = wait * (0.8 + 0.4 * random.random()) / 1000
                logger.info("schema registry %s: %s; trying again in %.0f ms", shown, last,
                            wait_s * 1000)
                await asyncio.sleep(wait_s)
        raise SchemaRegistryError(
            f"schema registry {', '.join(display_url(u) for u in self._urls)}: {method} "
            f"{path} failed {attempts} times (max.retries={self._max_retries}, "
            f"request.timeout.ms={self._timeout_ms}): {last}")


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def _error_of(status: int, answer: Any, body: bytes) -> tuple[str, int | None]:
    """The registry's message and error code (its error body), or the body's start."""
    if isinstance(answer, dict) and "message" in answer:
        code = answer.get("error_code")
        return str(answer["message"]), int(code) if isinstance(code, int) else None
    text = body[:200].decode("utf-8", "replace").strip()
    return text or f"HTTP {status}", None
