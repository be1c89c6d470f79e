"""Cron expressions as ``summary_schedule`` takes them: the standard five fields in UTC
(``minute hour day-of-month month day-of-week``, names like ``mon`` and ``jan``, ``7`` for
Sunday) or a macro (``@daily``...), turned into Celery schedules.

One cron rule Celery cannot follow is refused: when both day fields are restricted, cron runs
on either day and Celery only on days matching both. The settings check every expression when
they load; beat reads them again to build its schedule.
"""

from __future__ import annotations

import re

from celery.schedules import ParseException, crontab

from bot.core.errors import BeamError

__all__ = ["parse_cron"]

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_SUNDAY_RANGE = re.compile(r"^(?P<low>\d+)-7$")


def parse_cron(expression: str, *, repo: str) -> crontab:
    """The Celery schedule for a standard cron ``expression``; BEM-900 naming ``repo`` when it
    is not one."""
    where = f"repositories.{repo}.summary_schedule {expression!r}"
    text = " ".join(expression.split())
    text = _MACROS.get(text.lower(), text)
    fields = text.split(" ") if text else []
    if len(fields) != 5:
        raise BeamError(
            "BEM-900",
            f"{where} is not a cron expression: it needs five fields (minute hour "
            f"day-of-month month day-of-week, in UTC), or a macro such as @daily; it has "
            f"{len(fields)}",
        )
    minute, hour, day_of_month, month, day_of_week = fields
    if not day_of_month.startswith("*") and not day_of_week.startswith("*"):
        raise BeamError(
            "BEM-900",
            f"{where} restricts both the day of the month and the day of the week: cron runs "
            "on days matching either, the scheduler only on days matching both. Restrict one "
            "of them (use * for the other).",
        )
    try:
        return crontab(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month,
            day_of_week=_sunday_as_zero(day_of_week),
        )
    except (ValueError, ParseException) as error:
        raise BeamError("BEM-900", f"{where} is not a valid cron expression: {error}") from None


def _sunday_as_zero(field: str) -> str:
    """Cron allows 7 for Sunday (``7``, ``5-7``, ``1-7/2``); Celery counts Sunday as 0 only."""
    parts = []
    for part in field.split(","):
        base, _, step = part.partition("/")
        sunday = _SUNDAY_RANGE.match(base)
        if part == "7":
            part = "0"
        elif sunday is not None and (step or "1").isdigit() and int(step or "1") > 0:
            days = range(int(sunday["low"]), 8, int(step or "1"))
            # An empty range (8-7) stays as written, for Celery to refuse.
            part = ",".join(str(day % 7) for day in days) or part
        parts.append(part)
    return ",".join(parts)
