"""The Serve configuration a deployment serves, kept with the deployment and not only in Ray's GCS.

Ray keeps Serve's applications in the head's GCS. A head that starts again without it (a crash, `make
rotate-ray-token`, `make deploy` of a new image, a deployment without the GCS store) has no application,
and autostop would then see an idle cluster. So `make serve` keeps the configuration it deployed in
s3://<results bucket>/cluster/serve.json once the application runs, and `make serve ACTION=down` removes it.
cluster/ is written by the deployer and the control task only, never by a task a job can reach, so no job
can plant an application there. The control task (rayfleet/node/control/head_snapshot.py) applies a kept
configuration to a head that serves nothing, and while one is kept the cluster counts as serving: autostop
never scales it to zero, and `make deploy` and `rayfleet token rotate` refuse to restart the head under it.
"""

from __future__ import annotations

import json
import time

from rayfleet.core.bucket import SERVE_CONFIG

KEY = SERVE_CONFIG


def keep(s3, bucket: str, run: str, config: dict) -> None:
    """Keep what `make serve` deployed (Serve's declarative config, which holds no secret: the key stays in
    Secrets Manager and reaches only the gate)."""
    body = json.dumps({"run": run, "config": config, "kept_at": time.time()}, sort_keys=True)
    s3.put_object(Bucket=bucket, Key=KEY, Body=body.encode(), ContentType="application/json")


def forget(s3, bucket: str) -> None:
    s3.delete_object(Bucket=bucket, Key=KEY)


def kept(s3, bucket: str) -> dict | None:
    """{"run", "config", "kept_at"} as `keep` wrote it, or None when nothing is served (also when the bucket
    itself is gone: a deployment taken down serves nothing)."""
    try:
        body = s3.get_object(Bucket=bucket, Key=KEY)["Body"].read()
    except (s3.exceptions.NoSuchKey, s3.exceptions.NoSuchBucket):
        return None
    return json.loads(body)


def app_names(config: dict) -> list[str]:
    return [app["name"] for app in config.get("applications") or []]


def missing(record: dict | None, serving: list[dict]) -> list[str]:
    """The kept applications the head does not run at all (`serving`: the snapshot's summaries), i.e. what a
    head that started without them lacks. One the head has, in whatever state, is Serve's to bring up."""
    if record is None:
        return []
    running = {app.get("name") for app in serving}
    return [name for name in app_names(record["config"]) if name not in running]
