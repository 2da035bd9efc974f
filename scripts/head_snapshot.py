"""Runs beside the Ray head: writes the cluster's nodes and resources, as the head sees them, to S3.

    python -m scripts.head_snapshot --bucket B [--interval 30] [--once]

`make status` reads `s3://B/cluster/ray-status.json` so it can show Ray's view from a laptop that cannot
reach the head (the dashboard and GCS never leave the cluster's security group).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime

KEY = "cluster/ray-status.json"


def snapshot() -> dict:
    import ray

    nodes = [
        {
            "node_id": n["NodeID"][:12],
            "alive": n["Alive"],
            "address": n.get("NodeManagerAddress"),
            "resources": {k: v for k, v in n.get("Resources", {}).items() if not k.startswith("node:")},
        }
        for n in ray.nodes()
    ]
    return {
        "taken_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "nodes": nodes,
        "total": {k: v for k, v in ray.cluster_resources().items() if not k.startswith("node:")},
        "available": {k: v for k, v in ray.available_resources().items() if not k.startswith("node:")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--address", default="auto", help="Ray address (default: the local head)")
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--once", action="store_true")
    args = parser.parse_args(argv)

    from scripts import ray_auth

    ray_auth.use_token_auth()
    import boto3
    import ray

    ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
    s3 = boto3.client("s3")
    while True:
        body = json.dumps(snapshot(), indent=2).encode()
        s3.put_object(Bucket=args.bucket, Key=KEY, Body=body, ContentType="application/json")
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
