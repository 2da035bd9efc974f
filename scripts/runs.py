"""Recent runs, local and in S3: state, when, how long, where the results are.

    python -m scripts.runs [--limit 20] [--json] [--local-dir runs]      # make runs

Local runs are the directories under ./runs (recipe runs have run.json; runs of the jobs started directly
show what their files say). S3 runs are listed when `make deploy` has saved the outputs: run.json for
recipe runs, the trainer task's state for runs started with `make launch`.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from scripts.aws import Aws, MissingOutputs, RayfleetError, run_cli
from scripts.run_dir import RunDir, list_runs
from scripts.status import task_state
from scripts.tf_outputs import Outputs


def _duration(record: dict) -> float | None:
    if record.get("duration_s") is not None:
        return float(record["duration_s"])
    start = record.get("submitted_at") or record.get("launched_at")
    if not start or record.get("state") not in ("RUNNING", "SUBMITTED"):
        return None
    return (datetime.now(UTC) - datetime.fromisoformat(start)).total_seconds()


def _row(run: str, where: str, record: dict, results: str) -> dict:
    return {"run": run, "where": where, "state": record.get("state", "?"),
            "started": record.get("submitted_at") or record.get("created_at") or record.get("launched_at") or "",
            "duration_s": _duration(record), "results": results}  # fmt: skip


def local_runs(root: Path) -> list[dict]:
    rows = []
    for name in list_runs(str(root)):
        run_dir = RunDir(str(root), name)
        record = run_dir.record()
        if not record:  # a job run directly (make train-ddp-local, make demo): what its files say
            done = any((root / name).glob("checkpoint_*"))
            started = datetime.fromtimestamp((root / name).stat().st_mtime, UTC).isoformat(timespec="seconds")
            record = {"state": "CHECKPOINTED" if done else "?", "created_at": started}
        rows.append(_row(name, "local", record, run_dir.url))
    return rows


def s3_runs(out: Outputs) -> list[dict]:
    aws = Aws(out.region)
    storage = f"s3://{out.results_bucket}/runs"
    rows = []
    for name in list_runs(storage, out.region):
        run_dir = RunDir(storage, name, out.region)
        record = run_dir.record()
        if not record or record.get("state") == "SUBMITTED":
            launched = json.loads(run_dir.read("launch.json") or "{}")
            if not launched:
                continue
            record = {**launched, **record, "state": task_state(aws.client("ecs"), out, launched["task_arn"])}
        rows.append(_row(name, "ecs", record, run_dir.url + "/"))
    return rows


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def table(rows: list[dict]) -> str:
    if not rows:
        return "no runs yet: make run RECIPE=recipes/ddp.yaml (or make demo)"
    lines = [f"{'RUN':<34}{'WHERE':<7}{'STATE':<18}{'STARTED':<27}{'DURATION':<10}RESULTS"]
    lines += [f"{r['run']:<34}{r['where']:<7}{r['state']:<18}{r['started']:<27}{fmt_duration(r['duration_s']):<10}"
              f"{r['results']}" for r in rows]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.runs", description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--local-dir", default="runs", help="the local runs directory (default: ./runs)")
    parser.add_argument("--outputs", help="Terraform outputs JSON (default: .rayfleet/outputs.json)")
    opts = parser.parse_args(argv)
    rows = local_runs(Path(opts.local_dir).resolve())
    try:
        rows += s3_runs(Outputs.load(opts.outputs))
    except MissingOutputs:
        pass  # nothing deployed: local runs only
    except (RayfleetError, BotoCoreError, ClientError) as exc:
        print(f"warning: S3 runs not listed: {exc}", file=sys.stderr)
    rows.sort(key=lambda r: r["started"], reverse=True)
    rows = rows[: opts.limit]
    print(json.dumps(rows, indent=2) if opts.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
