"""The certificate cache (runonce/auth/certs.py) against a loopback certs endpoint, with an injected clock:
how often Google's endpoint would be asked, and what a request gets back, as time moves."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from runonce.auth.certs import MIN_LIFETIME, RETRY_AFTER_FAILURE, UNKNOWN_KID_INTERVAL, CertCache, CertsUnavailable
from tests.support.clock import Clock
from tests.support.oidc import CertsServer, SigningKey, make_key


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return make_key("key-1")


@pytest.fixture(scope="module")
def next_key() -> SigningKey:
    return make_key("key-2")


@pytest.fixture
def server(key: SigningKey) -> Iterator[CertsServer]:
    with CertsServer([key], max_age=300) as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


@pytest.fixture
def clock() -> Clock:
    return Clock(1000.0)  # the cache reads a monotonic clock: seconds


@pytest.fixture
def cache(server: CertsServer, http: httpx.AsyncClient, clock: Clock) -> CertCache:
    return CertCache(server.url, http, clock=clock)


async def test_a_known_kid_is_served_from_the_cache_until_max_age_runs_out(cache, server, clock, key):
    assert await cache.get(key.kid) == key.cert_pem
    clock.advance(299)
    assert await cache.get(key.kid) == key.cert_pem
    assert server.fetches == 1

    clock.advance(1)  # max-age=300 is over
    assert await cache.get(key.kid) == key.cert_pem
    assert server.fetches == 2


async def test_the_age_header_shortens_the_lifetime(cache, server, clock, key):
    server.max_age, server.age = 600, 500
    await cache.get(key.kid)
    clock.advance(99)
    await cache.get(key.kid)
    assert server.fetches == 1
    clock.advance(1)
    await cache.get(key.kid)
    assert server.fetches == 2


@pytest.mark.parametrize("max_age", [None, 0], ids=["no-cache-control", "max-age-0"])
async def test_a_missing_or_zero_max_age_still_caches_for_a_minute(cache, server, clock, key, max_age):
    server.max_age = max_age
    for _ in range(10):
        await cache.get(key.kid)
    assert server.fetches == 1
    clock.advance(MIN_LIFETIME)
    await cache.get(key.kid)
    assert server.fetches == 2


async def test_an_unknown_kid_refetches_at_most_once_a_minute(cache, server, clock, key, next_key):
    assert await cache.get(key.kid) == key.cert_pem
    assert await cache.get("forged") is None
    clock.advance(UNKNOWN_KID_INTERVAL - 1)
    assert await cache.get("forged") is None
    assert server.fetches == 1  # the unknown kid cost nothing within the minute

    server.keys = [key, next_key]  # Google starts publishing a new key
    clock.advance(1)
    assert await cache.get(next_key.kid) == next_key.cert_pem  # picked up by the one refetch
    assert await cache.get("forged-again") is None
    assert server.fetches == 2


async def test_a_thousand_concurrent_random_kids_cause_one_fetch(cache, server, key):
    results = await asyncio.gather(*(cache.get(secrets.token_hex(20)) for _ in range(1000)))
    assert results == [None] * 1000
    assert server.fetches == 1
    assert await cache.get(key.kid) == key.cert_pem
    assert server.fetches == 1


async def test_an_unreachable_endpoint_is_unavailable_and_retried_after_a_pause(cache, server, clock, key):
    server.status = 500
    with pytest.raises(CertsUnavailable, match="500"):
        await cache.get(key.kid)
    with pytest.raises(CertsUnavailable):
        await cache.get(key.kid)
    assert server.fetches == 1  # a request flood during an outage does not hammer the endpoint

    server.status = 200
    clock.advance(RETRY_AFTER_FAILURE)
    assert await cache.get(key.kid) == key.cert_pem
    assert server.fetches == 2


async def test_expired_certificates_stay_in_use_while_the_endpoint_fails(cache, server, clock, key):
    await cache.get(key.kid)
    server.status = 503
    clock.advance(300)
    assert await cache.get(key.kid) == key.cert_pem
    assert await cache.get(key.kid) == key.cert_pem
    assert server.fetches == 2

    server.status = 200
    clock.advance(RETRY_AFTER_FAILURE)
    await cache.get(key.kid)
    assert server.fetches == 3


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b"{}",
        b'{"k": 42}',
        b'{"k": "-----BEGIN CERTIFICATE-----\\ngarbage\\n-----END CERTIFICATE-----\\n"}',
    ],
    ids=["not-json", "array", "empty-object", "non-string", "bad-pem"],
)
async def test_a_response_without_usable_certificates_counts_as_a_failure(cache, server, body):
    server.raw_body = body
    with pytest.raises(CertsUnavailable):
        await cache.get("k")


async def test_one_bad_certificate_does_not_spoil_the_others(cache, server, key):
    server.raw_body = (f'{{"broken": "nope", "{key.kid}": {httpx.Response(200, json=key.cert_pem).text}}}').encode()
    assert await cache.get(key.kid) == key.cert_pem
    assert await cache.get("broken") is None
