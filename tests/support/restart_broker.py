"""``python tests/support/restart_broker.py CONTROL_URL BROKER LOG [DOWN_S]``: restart one broker of the
reference cluster through its control port (a controlled stop, then, DOWN_S seconds later (default 0), a
start), as an operator's restart command (``systemctl restart kafka``) would: the ``--restart-command`` of
the rolling-restart tests. It appends the broker's id to LOG first, so that a test counts the restarts the
conductor asked for."""

from __future__ import annotations

import sys
import time

import httpx


def main(argv: list[str]) -> int:
    url, broker, log, *rest = argv
    down_s = float(rest[0]) if rest else 0.0
    with open(log, "a") as out:
        out.write(f"{broker}\n")
    for action, body in (("stop", {"controlled": True}), ("start", {})):
        response = httpx.post(f"{url}/brokers/{broker}/{action}", json=body, timeout=60)
        if response.status_code != 200:
            sys.stderr.write(f"{action} broker {broker}: {response.status_code} {response.text}\n")
            return 1
        if action == "stop" and down_s:
            time.sleep(down_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
