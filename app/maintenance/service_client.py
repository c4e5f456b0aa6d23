"""The kafka-health service over HTTP, for the conductor's steps that the service performs: demoting and
promoting a broker (``POST /api/v1/actions/demote-broker|promote-broker`` ``{"broker", "dry_run": false}``,
202 with ``action_id``, followed at ``GET /api/v1/actions/{id}`` as every action is; a 409, another
demotion or promotion unfinished or a reassignment in ZooKeeper, is a
:class:`~app.maintenance.rolling_restart.ServiceConflictError` the conductor asks again after) and its
maintenance silence (``POST /api/v1/silences``, ``POST /api/v1/silences/{id}/expire``; the open alerts it
holds from ``GET /api/v1/alerts?state=open``, their ``silenced_by``).

The silence's request body is built in one place, :func:`maintenance_silence_body`, and its id read in one,
:func:`silence_id`.
"""

from __future__ import annotations

from typing import Any

import httpx

from app.maintenance.rolling_restart import ServiceConflictError, ServiceError

TIMEOUT_S = 30.0
PAGE = 100
"""Items per page of the lists read (actions, alerts)."""


def maintenance_silence_body(broker: int, duration_s: int, comment: str) -> dict[str, Any]:
    """The body of ``POST /api/v1/silences`` that silences what broker ``broker``'s absence raises, and
    nothing else (docs/alert-rules.md "Silences": rule 5 for it, rules 2 and 6 findings whose only missing
    ISR member is it, rule 7 for it), for ``duration_s`` seconds."""
    return {"maintenance": {"broker": broker}, "duration_s": duration_s, "comment": comment}


def silence_id(body: Any) -> str:
    """The id of the silence ``POST /api/v1/silences`` answered with."""
    if not isinstance(body, dict) or "id" not in body:
        raise ServiceError(f"POST /api/v1/silences answered without a silence id: {body!r}")
    return str(body["id"])


class ServiceClient:
    """:class:`~app.maintenance.rolling_restart.MaintenanceService` over HTTP with a bearer token (an
    operator's)."""

    def __init__(self, url: str, token: str | None, *, client: httpx.Client | None = None) -> None:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self.url = url.rstrip("/")
        self.http = client or httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT_S)

    def close(self) -> None:
        self.http.close()

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, ok: tuple[int, ...] = ()
    ) -> Any:
        try:
            response = self.http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ServiceError(f"{method} {self.url}{path}: {exc}") from exc
        if response.status_code == 409 and 409 not in ok:
            raise ServiceConflictError(f"{method} {path} answered 409: {_detail(response)}")
        if response.status_code >= 400 and response.status_code not in ok:
            raise ServiceError(f"{method} {path} answered {response.status_code}: {_detail(response)}")
        try:
            return response.json()
        except ValueError:
            return None

    def _start_action(self, kind: str, broker: int) -> str:
        body = self._request("POST", f"/api/v1/actions/{kind}", {"broker": broker, "dry_run": False})
        action_id = body.get("action_id") if isinstance(body, dict) else None
        if action_id is None:
            raise ServiceError(f"POST /api/v1/actions/{kind} started no action: {body!r}")
        return str(action_id)

    def start_demotion(self, broker: int) -> str:
        return self._start_action("demote-broker", broker)

    def start_promotion(self, broker: int) -> str:
        return self._start_action("promote-broker", broker)

    def action_state(self, action_id: str) -> tuple[str, str | None]:
        body = self._request("GET", f"/api/v1/actions/{action_id}")
        if not isinstance(body, dict) or "state" not in body:
            raise ServiceError(f"GET /api/v1/actions/{action_id} answered {body!r}")
        error = body.get("error")
        return str(body["state"]), None if error is None else str(error)

    def find_action(self, kind: str, broker: int, since: float) -> str | None:
        # newest first: the first match is the newest; older pages only hold older actions
        offset = 0
        while True:
            body = self._request("GET", f"/api/v1/actions?limit={PAGE}&offset={offset}")
            if not isinstance(body, list):
                raise ServiceError(f"GET /api/v1/actions answered {body!r}")
            for action in body:
                if not isinstance(action, dict) or float(action.get("requested_at") or 0) < since:
                    continue
                request = action.get("request") or {}
                if (
                    action.get("kind") == kind
                    and request.get("broker") == broker
                    and not request.get("dry_run", False)
                ):
                    return str(action["id"])
            oldest = min((float(a.get("requested_at") or 0) for a in body if isinstance(a, dict)), default=0)
            if len(body) < PAGE or oldest < since:
                return None
            offset += PAGE

    def held(self, silence_id: str) -> int:
        count, offset = 0, 0
        while True:
            body = self._request("GET", f"/api/v1/alerts?state=open&limit={PAGE}&offset={offset}")
            items = body.get("items") if isinstance(body, dict) else None
            if not isinstance(items, list):
                raise ServiceError(f"GET /api/v1/alerts answered {body!r}")
            count += sum(1 for a in items if str(silence_id) in {str(s) for s in a.get("silenced_by") or []})
            if len(items) < PAGE:
                return count
            offset += PAGE

    def silence(self, broker: int, duration_s: int, comment: str) -> str:
        return silence_id(
            self._request("POST", "/api/v1/silences", maintenance_silence_body(broker, duration_s, comment))
        )

    def expire(self, silence_id: str) -> None:
        # gone (404) or expired already (409): what expiring it was for
        self._request("POST", f"/api/v1/silences/{silence_id}/expire", ok=(404, 409))

    def missing_routes(self, *, demote: bool, silence: bool) -> list[str]:
        """The routes the run needs that the service does not have (read from its /openapi.json)."""
        body = self._request("GET", "/openapi.json")
        paths = set(body.get("paths", {})) if isinstance(body, dict) else set()
        needed = []
        if demote:
            needed += ["/api/v1/actions/demote-broker", "/api/v1/actions/promote-broker"]
        if silence:
            needed.append("/api/v1/silences")
        missing = [path for path in needed if path not in paths]
        if silence and not any(p.startswith("/api/v1/silences/") and p.endswith("/expire") for p in paths):
            missing.append("/api/v1/silences/{id}/expire")
        return missing


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return str(body)[:300]
