"""``kafka-health silence add|list|expire``: the service's silences (``/api/v1/silences``) from a shell, as
a maintenance script sets them (docs/alert-rules.md, "Silences").

The service is ``--service-url``; the token is ``KAFKA_HEALTH_TOKEN`` (operator role to add and expire,
viewer to list). Exit codes: 0 done, 2 bad input (flags, a request the service refuses: one line naming
the problem), 1 the service unreachable or failing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import httpx

from app.cli.common import ExitCode, duration

HELP = "add, list and expire the service's silences (mute the pages of matching alerts for a while)"
DESCRIPTION = (
    "The service is --service-url, the token KAFKA_HEALTH_TOKEN. Exit codes: 0 done, 2 bad input (or a "
    "request the service refuses), 1 the service unreachable."
)
TOKEN_ENV = "KAFKA_HEALTH_TOKEN"
TIMEOUT_S = 30.0


class BadInputError(Exception):
    """Bad input: exit 2."""


class UnreachableError(Exception):
    """The service cannot be reached or failed: exit 1."""


def matcher(text: str) -> dict[str, Any]:
    """``name=value`` (equal) or ``name=~regex`` (the regex matches the whole label)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not a matcher: use name=value or name=~regex")
    if value.startswith("~"):
        return {"name": name, "value": value[1:], "regex": True}
    return {"name": name, "value": value, "regex": False}


def timestamp(text: str) -> int | str:
    """Whole seconds since the epoch, or an ISO 8601 time with its offset (sent as written)."""
    if text.isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time (ISO 8601 with offset, or epoch s)"
        ) from None
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no offset (add Z or +HH:MM)")
    return parsed.isoformat()


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service-url", required=True, metavar="URL", help="the kafka-health service")
    parser.add_argument("--format", choices=["text", "json"], default="text")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="verb", required=True, metavar="add|list|expire")
    add = sub.add_parser("add", help="create a silence")
    _common(add)
    add.add_argument(
        "--matcher",
        type=matcher,
        action="append",
        default=[],
        metavar="NAME=VALUE|NAME=~REGEX",
        help="cluster, rule, subject, broker, topic, group or severity (repeat: all must match)",
    )
    add.add_argument(
        "--maintenance-broker",
        type=int,
        metavar="N",
        help="silence what broker N's planned stop explains (rules 5, 7 and 6 for it, rule 2 where only it "
        "is missing from the ISRs)",
    )
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--duration", type=duration, metavar="DURATION", help="e.g. 30m, 2h, 600")
    when.add_argument("--ends-at", type=timestamp, metavar="TIME", help="ISO 8601 with offset, or epoch s")
    add.add_argument("--starts-at", type=timestamp, metavar="TIME", help="default now")
    add.add_argument("--comment", default="", help="why (shown with the silence and in the audit trail)")
    listing = sub.add_parser("list", help="list the silences, newest first")
    _common(listing)
    listing.add_argument(
        "--state", action="append", choices=["active", "pending", "expired"], help="(repeat; default all)"
    )
    expire = sub.add_parser("expire", help="end a silence now (its held alerts still open page)")
    _common(expire)
    expire.add_argument("id", type=int, help="the silence's id")


def _request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise BadInputError(f"set {TOKEN_ENV} to a token of the service (operator role to add or expire)")
    url = args.service_url.rstrip("/") + path
    try:
        response = httpx.request(
            method, url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT_S, **kwargs
        )
    except httpx.InvalidURL as exc:
        raise BadInputError(f"--service-url {args.service_url!r}: {exc}") from None
    except httpx.HTTPError as exc:
        raise UnreachableError(f"{args.service_url}: {type(exc).__name__}: {exc}") from None
    if response.status_code >= 500:
        raise UnreachableError(f"{url}: HTTP {response.status_code}: {_detail(response)}")
    if response.status_code >= 400:
        raise BadInputError(f"HTTP {response.status_code}: {_detail(response)}")
    return response.json()


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip().splitlines()[0] if response.text.strip() else response.reason_phrase
    return str(body.get("detail", body)) if isinstance(body, dict) else str(body)


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _line(silence: dict[str, Any]) -> str:
    what = [f"{m['name']}{'=~' if m['regex'] else '='}{m['value']}" for m in silence["matchers"]]
    if silence.get("maintenance") is not None:
        what.append(f"maintenance of broker {silence['maintenance']['broker']}")
    comment = f" ({silence['comment']})" if silence["comment"] else ""
    return (
        f"silence {silence['id']} {silence['state']} {_when(silence['starts_at'])} .. "
        f"{_when(silence['ends_at'])} by {silence['created_by']}: {', '.join(what)}{comment}"
    )


def _write(body: Any, fmt: str, out: TextIO) -> None:
    if fmt == "json":
        json.dump(body, out, indent=2)
        out.write("\n")
    elif isinstance(body, dict) and "items" in body:
        for silence in body["items"]:
            out.write(_line(silence) + "\n")
        if not body["items"]:
            out.write("no silences\n")
    else:
        out.write(_line(body) + "\n")


def _run(args: argparse.Namespace) -> Any:
    if args.verb == "add":
        body: dict[str, Any] = {"matchers": args.matcher, "comment": args.comment}
        if args.maintenance_broker is not None:
            body["maintenance"] = {"broker": args.maintenance_broker}
        if args.duration is not None:
            if args.duration < 1:
                raise BadInputError(f"--duration must be at least 1 s, got {args.duration:g} s")
            body["duration_s"] = math.ceil(args.duration)
        else:
            body["ends_at"] = args.ends_at
        if args.starts_at is not None:
            body["starts_at"] = args.starts_at
        if not args.matcher and args.maintenance_broker is None:
            raise BadInputError("give at least one --matcher (or --maintenance-broker)")
        return _request(args, "POST", "/api/v1/silences", json=body)
    if args.verb == "list":
        params = [("state", s) for s in args.state or []] + [("limit", "1000")]
        return _request(args, "GET", "/api/v1/silences", params=params)
    return _request(args, "POST", f"/api/v1/silences/{args.id}/expire")


def run(args: argparse.Namespace) -> int:
    try:
        body = _run(args)
    except BadInputError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return ExitCode.BAD_INPUT
    except UnreachableError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return ExitCode.FAILED
    _write(body, args.format, sys.stdout)
    return ExitCode.OK
