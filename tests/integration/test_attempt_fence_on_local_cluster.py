"""The attempt fence (rayfleet/recipes/attempt_fence.py) against a real cluster's state API."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.helpers import DASHBOARD_PORT, REPO

# A job that holds two actors of its own, one detached, and waits to be stopped.
JOB = """
import time, ray
@ray.remote(num_cpus=0)
class Held:
    def pid(self):
        import os
        return os.getpid()
held = Held.remote()
ray.get(held.pid.remote())
kept = Held.options(name="fence-detached", namespace="fence", lifetime="detached").remote()
ray.get(kept.pid.remote())
print("ready".upper(), flush=True)  # not a word of this source: the log echoes it
time.sleep(600)
"""

CLEAN = """
import ray
ray.kill(ray.get_actor("fence-detached", namespace="fence"))
"""

# The submitter's side, as run_job's fence does it: Ray job id by submission id, live actors, the wait.
CHECK = """
import json, shlex, sys, time
from ray.job_submission import JobSubmissionClient
from rayfleet.recipes import attempt_fence, jobs_api
url, job, clean = sys.argv[1], sys.argv[2], sys.argv[3]
client = jobs_api.client_for(url)
client.submit_job(submission_id=job, entrypoint=f"python -c {shlex.quote(sys.argv[4])}")
deadline = time.monotonic() + 240
while "READY" not in client.get_job_logs(job):
    assert time.monotonic() < deadline and client.get_job_status(job).is_terminal() is False, client.get_job_logs(job)
    time.sleep(0.5)
ray_job = attempt_fence.ray_job_of(client, job)
alive = attempt_fence.live_actors(url, ray_job)
client.stop_job(job)
lines = []
waited = attempt_fence.wait_gone("fence", ray_job, lambda j: attempt_fence.live_actors(url, j), echo=lines.append)
after = attempt_fence.live_actors(url, ray_job)
client.submit_job(submission_id=clean, entrypoint=f"python -c {shlex.quote(sys.argv[5])}")
while not client.get_job_status(clean).is_terminal():
    time.sleep(0.5)
unknown = attempt_fence.ray_job_of(client, "nope")
cleaned = str(client.get_job_status(clean))
print(json.dumps({"ray_job": ray_job, "alive": alive, "after": after, "unknown": unknown, "cleaned": cleaned}))
"""


def test_the_fence_sees_a_jobs_own_live_actors_on_the_state_api_until_the_job_is_stopped(cluster_env):
    """What only a real cluster shows: Ray's state API, asked on the token-authenticated dashboard by the Ray job
    id that the Jobs API gives for a submission id, lists that job's live actors and not its detached one, and
    lists none once the job is stopped; an unknown submission is nothing to wait for. The fence's own logic
    (waiting, its deadline, run_job's order) is unit-tested in tests/unit/recipes/test_attempt_fence.py."""
    url = f"http://127.0.0.1:{DASHBOARD_PORT}"
    args = [url, "rayfleet-fence-check", "rayfleet-fence-clean", JOB, CLEAN]
    done = subprocess.run(
        [sys.executable, "-c", CHECK, *args], env=cluster_env, cwd=REPO, capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["ray_job"] and seen["unknown"] is None, seen
    assert [name.split("(")[0] for name in seen["alive"]] == ["Held"], seen  # the detached one is left out
    assert seen["after"] == [] and seen["cleaned"].endswith("SUCCEEDED"), seen
