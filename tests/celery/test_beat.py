"""Beat on Loam: `beat_scheduler = "loam"` upserts the entries as Loam schedules and the
server fires them, so two beats (or a restarted one) never double a tick;
`loam-celery sync-schedules <app>` does the same without beat; solar is refused."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery.exceptions import ImproperlyConfigured
from celery.schedules import solar
from celery_kit import HERE, eventually

LOAM_CELERY = str(Path(sys.executable).with_name("loam-celery"))


@pytest.fixture(autouse=True)
def _no_schedules_left(app):
    """The schedules fire into the shared `celery` queue: remove them after each test, and
    the jobs their ticks left there, which a later test's worker would otherwise run and
    count as its own ticks' (a slow machine leaves a tick or two behind)."""
    from loam_celery.beat import sync_schedules

    yield
    sync_schedules(app, {})
    app.control.purge()


def _sync(celery_env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([LOAM_CELERY, "sync-schedules", "proj", *args], cwd=HERE, env=celery_env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_sync_schedules_command_maps_crontab_and_timedelta(app, celery_env):
    from loam_celery.beat import schedules_of

    first = _sync(celery_env)
    assert first.returncode == 0, first.stderr
    again = _sync(celery_env)
    assert again.returncode == 0, again.stderr
    assert sorted(again.stdout.split("\n")) == ["", "every-2s: unchanged", "nightly: unchanged"]
    recs = {r.id: r for r in schedules_of(app)}
    assert recs["nightly"].cron == "30 3 * * *" and recs["nightly"].tz == "UTC"
    assert recs["every-2s"].every_ns == 2_000_000_000 and recs["every-2s"].queue == "celery"
    assert recs["every-2s"].task.name == "proj.mark"


def test_solar_entries_are_refused_before_anything_is_written(app):
    from loam_celery.beat import schedules_of, sync_schedules

    before = {r.id for r in schedules_of(app)}
    dawn = object.__new__(solar)  # solar() itself needs the `ephem` package
    dawn.event, dawn.lat, dawn.lon, dawn.nowfun, dawn._app = "sunrise", 51.5, -0.1, None, app
    entries = {"dawn": {"task": "proj.mark", "schedule": dawn, "args": ("x",)},
               "fine": {"task": "proj.mark", "schedule": 30.0, "args": ("y",)}}  # fmt: skip
    with pytest.raises(ImproperlyConfigured, match="solar"):
        sync_schedules(app, entries)
    assert {r.id for r in schedules_of(app)} == before


def test_two_beats_fire_each_tick_once(app, start_beat, start_worker, marks):
    """Two beat processes at once, one of them restarted: every tick of the 2 s entry
    enqueues one job, and each job runs once."""
    from loam_celery.beat import schedules_of

    a, b = start_beat(), start_beat()
    a.wait_for("synced as Loam schedules")
    b.wait_for("synced as Loam schedules")
    a.stop()
    start_beat().wait_for("synced as Loam schedules")  # a restart
    start_worker(concurrency=2)
    time.sleep(7)
    rec = next(r for r in schedules_of(app) if r.id == "every-2s")
    assert rec.count >= 3
    assert eventually(lambda: len(marks("beat")) >= rec.count, timeout=10)
    time.sleep(1)
    seen = marks("beat")  # before the count: a job runs only after its tick is counted
    fired = next(r for r in schedules_of(app) if r.id == "every-2s").count
    # Never more jobs than ticks; the last tick or two may still be on their way when the
    # machine is busy.
    assert fired - 2 <= len(seen) <= fired
    assert len(set(seen)) == len(seen)  # and no tick ran twice
