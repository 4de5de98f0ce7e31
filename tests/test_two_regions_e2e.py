"""One schedule, two regions (docs/how-to/two-regions.md): the same Scheduler job in us-central1 and
europe-west1, each calling the `runonce serve` of its region with an OIDC token for that service's
own audience, both services on ONE store (the Firestore emulator, the Spanner emulator, a real
redis-server, one SQLite file). Both regions' jobs put the same `?project=&location=` in their URL
(the first region's, as Terraform's `jobs[*].regions` renders it), so both deliveries of one fire time
are one run.

Storms: every fire time delivered by both regions, each region's delivery duplicated (Scheduler
delivers at least once) and retried as Scheduler retries, all concurrent and interleaved. The
downstream counts executions per Idempotency-Key: one per fire time. Then a region goes down (its
server killed mid-storm, or never up): the other region alone still runs every fire time once."""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from runonce.run.delivery import Delivery
from tests.support import oidc
from tests.support.burst import LOST, TABLE
from tests.support.downstream import Downstream
from tests.support.procs import ServerProcess, free_port, require_services, start_server
from tests.support.stores import server_store_env

pytestmark = pytest.mark.e2e

PROJECT = "acme-prod"
JOB, ROUTE = "nightly-etl", "nightly-etl"
REGIONS = ("us-central1", "europe-west1")
KEY_LOCATION = REGIONS[0]
"""The `location` both regions' jobs carry in their URL: the first region's."""
INVOKER = "runonce-invoker@acme-prod.iam.gserviceaccount.com"
LEASE_SECONDS = 9.0
FIRE_TIMES = 30
RETRIED = {409, 429, 500, 502, 503, 504}
"""What Scheduler retries: any status outside 2xx; these are the ones runonce gives under load."""


def routes(downstream: Downstream) -> str:
    """The routes both regions' services load (Terraform passes both the same `routes`): one
    namespace for the route, not a region's."""
    route = {
        "target": {"type": "http", "url": f"{downstream.url}/{ROUTE}"},
        "namespace": {"project": PROJECT, "location": KEY_LOCATION},
        "job": JOB,
        "schedule": "*/5 * * * *",
    }
    return json.dumps({"routes": {ROUTE: route}})


@dataclass
class Region:
    """One region's runonce: its service (None while the region is down) and its audience."""

    name: str
    port: int
    server: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_region(region: Region, env: dict[str, str], tmp: Path) -> None:
    """The region's service, whose own URL is the audience it accepts (RUNONCE_AUDIENCE)."""
    region.server = start_server({**env, "RUNONCE_AUDIENCE": region.url}, tmp, port=region.port)


@pytest.fixture(scope="module", params=["firestore", "spanner", "redis", "sqlite"])
def two_regions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, certs: oidc.CertsServer
) -> Iterator[tuple[list[Region], Downstream, dict[str, str], Path]]:
    require_services("`runonce serve` processes")
    tmp = tmp_path_factory.mktemp(f"regions-{request.param}")
    with Downstream() as downstream:
        store_timeout = (LEASE_SECONDS - 1 - 2) / 2  # the settings rule: lease >= dispatch + 2 x store + 1
        env = {
            "RUNONCE_AUTH": "oidc",
            "RUNONCE_OIDC_CERTS_URL": certs.url,
            "RUNONCE_ALLOWED_CALLERS": INVOKER,
            "RUNONCE_ADMIN_CALLERS": INVOKER,
            "RUNONCE_ROUTES": routes(downstream),
            "RUNONCE_LOG_FORMAT": "text",
            "RUNONCE_LEASE_SECONDS": f"{LEASE_SECONDS:g}",
            "RUNONCE_DISPATCH_TIMEOUT_SECONDS": "2",
            "RUNONCE_STORE_TIMEOUT_SECONDS": f"{store_timeout:g}",
            **server_store_env(request.param, request, tmp),
        }
        regions = [Region(name, free_port()) for name in REGIONS]
        try:
            for region in regions:
                start_region(region, env, tmp)
            yield regions, downstream, env, tmp
        finally:
            for region in regions:
                if region.server:
                    region.server.stop()


def expected_run_id(fire_time: datetime) -> str:
    """What a single-region job at KEY_LOCATION gets for this fire time: the two-region recipe
    keys runs exactly as before."""
    return Delivery("scheduler", PROJECT, KEY_LOCATION, ROUTE, JOB, schedule_time=fire_time).run_id


def fire_times(prefix_minutes: int) -> list[datetime]:
    """FIRE_TIMES past fire times of */5, none shared with another test's storm."""
    base = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=prefix_minutes)
    return [base + timedelta(minutes=5 * index) for index in range(FIRE_TIMES)]


@dataclass
class Storm:
    """Both regions' Scheduler jobs firing the same fire times: each region's delivery 1 to 3
    times (at-least-once), every copy retried until a 200 or its region is gone."""

    regions: list[Region]
    key: oidc.SigningKey
    times: list[datetime]
    seed: int
    kill_region_after: int | None = None  # SIGKILL regions[0]'s service once this many 200s came back
    answers: Counter[tuple[int, str]] = field(default_factory=Counter)
    outside_table: list[str] = field(default_factory=list)
    run_ids: dict[tuple[str, datetime], set[str]] = field(default_factory=dict)  # (region, time) -> run_ids
    lost: Counter[str] = field(default_factory=Counter)  # copies that found their region down, by region
    done: int = 0

    def plan(self) -> list[tuple[Region, datetime]]:
        rng = random.Random(self.seed)
        copies = [
            (region, time) for time in self.times for region in self.regions for _ in range(rng.choice([1, 2, 3]))
        ]
        rng.shuffle(copies)  # interleaved: regions and fire times in any order, duplicates racing
        return copies

    async def run(self) -> None:
        gate = asyncio.Semaphore(32)
        async with httpx.AsyncClient(timeout=30) as client:
            await asyncio.gather(*(self._deliver(client, gate, region, time) for region, time in self.plan()))

    async def _deliver(
        self, client: httpx.AsyncClient, gate: asyncio.Semaphore, region: Region, time: datetime
    ) -> None:
        token = oidc.sign(self.key, oidc.claims(audience=region.url, email=INVOKER))
        headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "X-CloudScheduler-JobName": JOB,
            "X-CloudScheduler-ScheduleTime": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        # As Terraform renders both regions' jobs: each its own service, the same namespace.
        url = f"{region.url}/v1/routes/{ROUTE}:run?project={PROJECT}&location={KEY_LOCATION}"
        async with gate:
            for _ in range(200):
                try:
                    response = await client.post(url, headers=headers, content=b"{}")
                except LOST:
                    self.lost[region.name] += 1  # the region is down: Scheduler's retries there fail too
                    return
                status = _status(response)
                self.answers[(response.status_code, status)] += 1
                if (response.status_code, status) not in TABLE:
                    self.outside_table.append(f"{response.status_code} {response.text[:300]}")
                if response.status_code == 200:
                    self.run_ids.setdefault((region.name, time), set()).add(response.json()["run_id"])
                    self.done += 1
                    if self.done == self.kill_region_after and self.regions[0].server:
                        self.regions[0].server.kill()
                    return
                if response.status_code not in RETRIED:
                    return
                await asyncio.sleep(0.05 + 0.1 * random.random())


def _status(response: httpx.Response) -> str:
    try:
        return str(response.json().get("status", ""))
    except ValueError:
        return ""


def seed() -> int:
    value = int(os.environ.get("RUNONCE_TEST_SEED", random.randrange(2**32)))
    print(f"storm seed: {value} (RUNONCE_TEST_SEED={value} replays the same plan)")
    return value


def executed(downstream: Downstream) -> Counter[str]:
    """Executions per run_id: the downstream dedupes by Idempotency-Key (runonce sends the run_id)."""
    return Counter(downstream.keys.get(f"/{ROUTE}", []))


def assert_once_per_fire_time(calls: Counter[str], expected: dict[datetime, str], storm: Storm) -> None:
    """Every fire time executed, under its run_id, and nothing else. A run is called once, but for a
    run whose outcome runonce could not record or tell (answered 504: the claim is kept), which
    the retry after the lease sends again with the same Idempotency-Key for the downstream to
    dedupe: with the Spanner emulator, which runs one transaction at a time, a storm makes some."""
    assert set(calls) == set(expected.values()), "a fire time never executed, or one nobody delivered"
    resent = sum(calls.values()) - len(calls)
    assert resent <= storm.answers[(504, "unknown")], (calls.most_common(3), dict(storm.answers))


def admin_records(region: Region, key: oidc.SigningKey, run_ids: list[str]) -> Counter[str]:
    """The status of each run's record, as an admin reads them from `region`'s service."""
    token = oidc.sign(key, oidc.claims(audience=region.url, email=INVOKER))
    statuses: Counter[str] = Counter()
    with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {token}"}) as client:
        for run_id in run_ids:
            response = client.get(f"{region.url}/v1/runs/{run_id}")
            statuses[response.json().get("status", str(response.status_code))] += 1
    return statuses


def test_both_regions_firing_in_storms_execute_each_fire_time_once(two_regions, google_key) -> None:
    regions, downstream, _, _ = two_regions
    times = fire_times(1)
    before = executed(downstream)
    storm = Storm(regions, google_key, times, seed())
    asyncio.run(storm.run())

    assert storm.outside_table == [] and not storm.lost, storm.answers
    expected = {time: expected_run_id(time) for time in times}
    for (region, time), run_ids in storm.run_ids.items():
        assert run_ids == {expected[time]}, f"{region} keyed {time} apart"
    assert {region for region, _ in storm.run_ids} == set(REGIONS)
    assert_once_per_fire_time(executed(downstream) - before, expected, storm)
    assert admin_records(regions[1], google_key, list(expected.values())) == {"completed": FIRE_TIMES}
    print(f"{sum(storm.answers.values())} answers: {dict(storm.answers)}")


def test_a_region_never_up_leaves_every_fire_time_to_the_other(two_regions, google_key) -> None:
    """us-central1's service is down for the whole storm (its port refuses connections)."""
    regions, downstream, env, tmp = two_regions
    down, up = regions
    assert down.server is not None
    down.server.stop()
    down.server = None
    try:
        times = fire_times(2)
        before = executed(downstream)
        storm = Storm(regions, google_key, times, seed())
        asyncio.run(storm.run())

        assert storm.outside_table == [] and storm.lost[up.name] == 0 and storm.lost[down.name] > 0
        expected = {time: expected_run_id(time) for time in times}
        assert {time for region, time in storm.run_ids if region == up.name} == set(times)
        calls = executed(downstream) - before
        assert_once_per_fire_time(calls, expected, storm)
    finally:
        start_region(down, env, tmp)  # back up: the region's deliveries of those times now replay
    replay = Storm(regions, google_key, times[:5], seed())
    asyncio.run(replay.run())
    assert set(replay.answers) == {(200, "duplicate")}, replay.answers
    assert executed(downstream) - before == calls, "a replay called the downstream"


def test_a_region_killed_mid_storm_leaves_the_other_to_run_every_fire_time_once(two_regions, google_key) -> None:
    """us-central1's service is SIGKILLed after a third of the storm's 200s: what it held (claimed,
    maybe dispatched) is taken over by europe-west1's deliveries after the lease, with the same
    run_id, so the downstream still sees one execution per fire time."""
    regions, downstream, env, tmp = two_regions
    times = fire_times(3)
    before = executed(downstream)
    storm = Storm(regions, google_key, times, seed(), kill_region_after=FIRE_TIMES // 3)
    try:
        asyncio.run(storm.run())
        assert regions[0].server is not None and regions[0].server.proc.returncode == -9
    finally:
        if regions[0].server is not None:
            regions[0].server.stop()
        start_region(regions[0], env, tmp)

    assert storm.outside_table == [], storm.outside_table
    assert storm.lost[regions[1].name] == 0
    expected = {time: expected_run_id(time) for time in times}
    assert {time for region, time in storm.run_ids if region == regions[1].name} == set(times)
    calls = executed(downstream) - before
    # One execution per fire time: a run the killed service had dispatched is dispatched again by
    # the other region after its lease with the same Idempotency-Key, which the downstream dedupes.
    assert set(calls) == set(expected.values()), "a fire time never executed, or one nobody delivered"
    assert admin_records(regions[1], google_key, list(expected.values())) == {"completed": FIRE_TIMES}
    print(f"lost to the killed region: {dict(storm.lost)}; calls {sum(calls.values())} for {len(calls)} runs")


def test_a_force_run_in_both_regions_is_one_force_run(two_regions, google_key) -> None:
    """`gcloud scheduler jobs run` in each region delivers the next fire time at once: both regions'
    force runs (forced_runs: separate, the default) are one run of their own, executed once."""
    regions, downstream, _, _ = two_regions
    now = datetime.now(UTC)
    next_fire = now.replace(second=0, microsecond=0) + timedelta(minutes=10 - now.minute % 5)
    before = executed(downstream)
    storm = Storm(regions, google_key, [next_fire], seed())
    asyncio.run(storm.run())

    forced = Delivery("scheduler-forced", PROJECT, KEY_LOCATION, ROUTE, JOB, schedule_time=next_fire).run_id
    assert {run_id for run_ids in storm.run_ids.values() for run_id in run_ids} == {forced}, storm.answers
    assert {region for region, _ in storm.run_ids} == set(REGIONS)
    assert executed(downstream) - before == Counter({forced: 1})
