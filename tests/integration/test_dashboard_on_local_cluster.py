"""`rayfleet dashboard --local` against the session's real local cluster: the one-time URL it prints hands the
browser Ray's own session cookie, and Ray's dashboard then answers its authenticated API with it, and not
without it. What only this proves: that the cookie's name and form are the ones the Ray release in use reads
(the handoff itself is tests/unit/ops/test_dashboard.py's). The deployment's SSM port-forward needs AWS."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration


def request(url: str, cookie: str | None = None) -> http.client.HTTPResponse:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", parts.path or "/", headers={"Cookie": cookie} if cookie else {})
    return connection.getresponse()


def test_the_dashboard_verb_hands_the_browser_a_session_ray_accepts(cluster_env):
    command = [sys.executable, "-m", "rayfleet.cli.main", "dashboard", "--local", "--no-browser"]
    verb = subprocess.Popen(command, env=cluster_env, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        said = [verb.stdout.readline(), verb.stdout.readline()]  # the dashboard's address, then the one-time URL
        dashboard = re.search(r"dashboard of the local cluster: (http://127\.0\.0\.1:\d+)/ ", said[0])
        once = re.search(r"open (http://127\.0\.0\.1:\d+/\S+) once within", said[1])
        assert dashboard and once, said
        api = dashboard[1] + "/api/jobs/"
        assert request(api).status in (401, 403)  # token auth is on: nothing without the token
        answer = request(once[1])
        assert answer.status == 303 and answer.getheader("Location") == dashboard[1] + "/"
        cookie = answer.getheader("Set-Cookie").split(";", 1)[0]
        assert request(api, cookie).status == 200  # Ray's own dashboard takes the session
        assert verb.wait(timeout=30) == 0  # its one answer given, the verb ends
    finally:
        if verb.poll() is None:
            verb.kill()
