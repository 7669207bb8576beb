"""When a schedule ticks: cron expressions in a time zone and fixed `every` intervals,
bounded by start/end and shifted by `offset` (BullMQ's repeat options). Pure functions
over a ScheduleRecord; times are int ns since the epoch, UTC.

Cron expressions have 5 fields (minute hour day month weekday) or 6 (seconds first, as
BullMQ's cron-parser reads them), or a macro (`@hourly`, `@daily`, ...). `croniter`
walks local wall-clock times; this module maps each to the instants it names in the
zone, with daylight-saving changes handled as Vixie cron and cronie do:

- Clocks go forward (a gap): a fixed-time tick inside the gap (`30 2 * * *`) fires once,
  at the moment of the jump; a wildcard tick (the second, minute or hour field starts
  with `*`, e.g. `*/15 * * * *` or `0 * * * *`) inside the gap does not fire: those
  times never happen.
- Clocks go back (an hour repeats): a fixed-time tick fires once, the first time its
  wall time comes round; a wildcard tick fires in both passes, so an hourly job still
  runs every hour of elapsed time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

SEC = 1_000_000_000
MIN_EVERY_NS = 1_000_000  # 1 ms: BullMQ's resolution
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# A daylight-saving change moves wall time by at most a few hours; look this far around
# an instant for one.
_DST_HORIZON = 6 * 3600
_MAX_STEPS = 200_000  # candidates per search: a whole hour of an every-second rule, many times
_EPOCH = datetime(1970, 1, 1)


class Rule:
    """The tick times of one schedule, with start, end and offset applied."""

    def __init__(self, start_ns: int = 0, end_ns: int = 0) -> None:
        self.start_ns = start_ns
        self.end_ns = end_ns

    def next_after(self, t_ns: int) -> int | None:
        """The first tick strictly after `t_ns`, or None if there is none."""
        if self.start_ns and t_ns < self.start_ns:
            t_ns = self.start_ns - 1
        n = self._next_after(t_ns)
        if n is None or (self.end_ns and n > self.end_ns):
            return None
        return n

    def latest_at_or_before(self, t_ns: int) -> int | None:
        """The last tick at or before `t_ns`, or None if there is none."""
        if self.end_ns and t_ns > self.end_ns:
            t_ns = self.end_ns
        n = self._latest_at_or_before(t_ns)
        if n is None or (self.start_ns and n < self.start_ns):
            return None
        return n

    def _next_after(self, t_ns: int) -> int | None:
        raise NotImplementedError

    def _latest_at_or_before(self, t_ns: int) -> int | None:
        raise NotImplementedError


class EveryRule(Rule):
    """Ticks at `first_ns + k * every_ns`, k = 0, 1, 2, ..."""

    def __init__(self, first_ns: int, every_ns: int, start_ns: int = 0, end_ns: int = 0) -> None:
        super().__init__(start_ns, end_ns)
        self.first_ns = first_ns
        self.every_ns = every_ns

    def _next_after(self, t_ns: int) -> int | None:
        if t_ns < self.first_ns:
            return self.first_ns
        return self.first_ns + ((t_ns - self.first_ns) // self.every_ns + 1) * self.every_ns

    def _latest_at_or_before(self, t_ns: int) -> int | None:
        if t_ns < self.first_ns:
            return None
        return self.first_ns + (t_ns - self.first_ns) // self.every_ns * self.every_ns


@dataclass(frozen=True, slots=True)
class CronExpr:
    expr: str  # 5 or 6 fields, macros expanded
    seconds: bool  # 6 fields, seconds first
    wildcard: bool  # Vixie's MIN_STAR | HR_STAR (and the seconds field): see the module doc


def parse_cron(text: str, field: str = "cron") -> CronExpr:
    """Check a cron expression; InvalidArgument naming `field` if it is not one."""
    expr = MACROS.get(text.strip().lower(), text.strip())
    parts = expr.split()
    if len(parts) not in (5, 6):
        raise InvalidArgument(
            field,
            f"{text!r} has {len(parts)} fields; use 5 (minute hour day-of-month month day-of-week), "
            "6 (a seconds field first) or a macro such as @daily",
        )
    seconds = len(parts) == 6
    try:
        croniter(expr, datetime(2000, 1, 1), second_at_beginning=seconds)
    except (CroniterError, ValueError, KeyError, TypeError) as e:
        raise InvalidArgument(field, f"{text!r} is not a valid cron expression: {e}") from None
    timing = parts[:3] if seconds else parts[:2]
    return CronExpr(" ".join(parts), seconds, any(p.startswith("*") for p in timing))


def parse_tz(name: str, field: str = "tz") -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise InvalidArgument(field, f"{name!r} is not a known IANA time zone ({e})") from None


class CronRule(Rule):
    def __init__(
        self, cron: CronExpr, tz: ZoneInfo, offset_ns: int = 0, start_ns: int = 0, end_ns: int = 0
    ) -> None:
        super().__init__(start_ns, end_ns)
        self.cron = cron
        self.tz = tz
        self.offset_ns = offset_ns

    # The offset shifts every tick: tick = base + offset, base on whole seconds.
    def _next_after(self, t_ns: int) -> int | None:
        b = self._base_next((t_ns - self.offset_ns) // SEC)
        return None if b is None else b * SEC + self.offset_ns

    def _latest_at_or_before(self, t_ns: int) -> int | None:
        b = self._base_latest((t_ns - self.offset_ns) // SEC)
        return None if b is None else b * SEC + self.offset_ns

    # -- wall time <-> instants ------------------------------------------------------------
    def _wall(self, t_s: int) -> datetime:
        return datetime.fromtimestamp(t_s, self.tz).replace(tzinfo=None)

    def _offset_s(self, t_s: int) -> int:
        return int(datetime.fromtimestamp(t_s, self.tz).utcoffset().total_seconds())  # type: ignore[union-attr]

    def _at(self, wall: datetime, fold: int) -> int:
        off = wall.replace(tzinfo=self.tz, fold=fold).utcoffset()
        return (wall - _EPOCH) // timedelta(seconds=1) - int(off.total_seconds())  # type: ignore[union-attr]

    def _instants(self, wall: datetime) -> list[int]:
        """The instants (s) at which a cron match at local `wall` fires, ascending."""
        s0, s1 = self._at(wall, 0), self._at(wall, 1)
        if s0 == s1:
            return [s0]
        if self._wall(s0) == wall:  # an hour that repeats: s0 is the first pass
            return [s0, s1] if self.cron.wildcard else [s0]
        if self.cron.wildcard:  # a gap: the time never happens
            return []
        # Fixed time in a gap: fire at the jump, the first instant with the new offset.
        lo, hi = min(s0, s1), max(s0, s1)
        after = self._offset_s(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._offset_s(mid) == after:
                hi = mid
            else:
                lo = mid
        return [hi]

    def _iter(self, start: datetime):
        return croniter(self.cron.expr, start, second_at_beginning=self.cron.seconds)

    def _base_next(self, t_s: int) -> int | None:
        wall = self._wall(t_s)
        # An hour repeating soon after t_s holds instants after t_s whose wall time is
        # before `wall`: start that much earlier.
        back = self._offset_s(t_s) - self._offset_s(t_s + _DST_HORIZON)
        it = self._iter(wall - timedelta(seconds=max(back, 0)))
        best: int | None = None
        for _ in range(_MAX_STEPS):
            try:
                cand = it.get_next(datetime)
            except CroniterBadDateError:
                break
            inst = self._instants(cand)
            if not inst:
                continue
            if best is not None and inst[0] > best:
                break  # later wall times only give later instants
            for x in inst:
                if x > t_s and (best is None or x < best):
                    best = x
        return best

    def _base_latest(self, t_s: int) -> int | None:
        wall = self._wall(t_s)
        # An hour that repeated shortly before t_s holds instants before t_s whose wall
        # time is after `wall`: start that much later.
        ahead = self._offset_s(t_s - _DST_HORIZON) - self._offset_s(t_s)
        it = self._iter(wall + timedelta(seconds=max(ahead, 0) + 1))
        best: int | None = None
        for _ in range(_MAX_STEPS):
            try:
                cand = it.get_prev(datetime)
            except CroniterBadDateError:
                break
            inst = self._instants(cand)
            if not inst:
                continue
            if best is not None and inst[-1] < best:
                break
            for x in inst:
                if x <= t_s and (best is None or x > best):
                    best = x
        return best


def rule_of(rec: pb.ScheduleRecord) -> Rule:
    """The rule of a stored (already validated) schedule record."""
    if rec.cron:
        return CronRule(parse_cron(rec.cron), parse_tz(rec.tz), rec.offset_ns, rec.start_ns, rec.end_ns)
    # `every` counts from the start date if there is one (its first tick), else from when
    # the rule was set (first tick one interval later, as Celery's timedelta entries do).
    first = (rec.start_ns if rec.start_ns else rec.updated_ns + rec.every_ns) + rec.offset_ns
    return EveryRule(first, rec.every_ns, rec.start_ns, rec.end_ns)
