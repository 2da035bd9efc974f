"""Start, run and stop one rehearsal: moto, the podman network, the services, the agent loop; then nothing.

`up` runs in the foreground until Ctrl-C or SIGTERM (`down` sends it), and whatever way it ends it removes
what it started: every container, pod, podman secret and the network labelled with its id, and moto. Its
state file (.rayfleet/rehearsal/state.json) lets `down` find a rehearsal that was killed outright.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from rayfleet.core.errors import RayfleetError
from tools.rehearsal import podman, reapply
from tools.rehearsal.agent import Agent, say
from tools.rehearsal.cloud import SIGNED_PLAIN, Moto, deploy
from tools.rehearsal.host import Adaptation, Host
from tools.rehearsal.store import GcsStore, store_of

ROOT = Path(__file__).resolve().parents[2]
STATE_DIR = ROOT / ".rayfleet" / "rehearsal"
NODES_SCRIPT = (
    "import json,os,urllib.request;"
    "r=urllib.request.Request('http://127.0.0.1:{port}/nodes?view=summary',"
    "headers={{'Authorization':'Bearer '+os.environ.get('RAY_AUTH_TOKEN','')}});"
    "d=json.load(urllib.request.urlopen(r,timeout=5));"
    "print(json.dumps([n.get('raylet',{{}}).get('state') for n in d['data']['summary']]))"
)


class RehearsalError(RayfleetError):
    pass


@dataclass
class Options:
    picture: dict
    tag: str
    port: int = 0
    state_dir: Path = STATE_DIR
    ready_timeout: float = 600
    host: Host | None = None
    container_endpoint: str | None = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(state_dir: Path) -> dict | None:
    path = state_dir / "state.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def check_images(picture: dict, tag: str) -> None:
    images = sorted({c["image"] for spec in picture["taskDefinitions"].values() for c in spec["containerDefinitions"]})
    missing = [i for i in images if not podman.image_exists(i)]
    if missing:
        raise RehearsalError(f"images not built: {', '.join(missing)}; build them with `make build IMAGE_TAG={tag}`")


class Rehearsal:
    def __init__(self, opts: Options):
        self.opts = opts
        self.rid = uuid.uuid4().hex[:6]
        self.moto: Moto | None = None
        self.store: GcsStore | None = None
        self.agent: Agent | None = None
        self.network: dict | None = None
        self.host: Host | None = None
        self.state_path = opts.state_dir / "state.json"

    # -- up ----------------------------------------------------------------------------------------------
    def run(self, ready=None) -> int:
        """Start everything, wait for the cluster, then run the agent until a signal. Always cleans up."""
        signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {s: signal.getsignal(s) for s in signals}
        for s in signals:  # also when started in the background, where a shell leaves SIGINT ignored
            signal.signal(s, interrupt)
        try:
            self._start()
            self._wait_for_cluster()
            self._ready(ready)
            while True:
                self.agent.step()
                self._apply_pending()
                time.sleep(2)
        except KeyboardInterrupt:
            print(flush=True)
            say("stopping (Ctrl-C or SIGTERM)")
            return 0
        finally:
            for s in previous:
                signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not leave half of it running
            self.teardown()
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _start(self) -> None:
        opts = self.opts
        if not podman.installed():
            raise RehearsalError(
                f"podman is not installed: the rehearsal runs the task definitions with it ({podman.INSTALL})"
            )
        existing = read_state(opts.state_dir)
        if existing and _alive(existing.get("pid", -1)) and existing.get("pid") != os.getpid():
            raise RehearsalError(
                f"a rehearsal is already running (pid {existing['pid']}); stop it with `rayfleet rehearse down`"
            )
        if existing:  # killed outright last time: clear what it left
            podman.remove_everything(existing.get("rid"))
        check_images(opts.picture, opts.tag)
        opts.state_dir.mkdir(parents=True, exist_ok=True)
        self._write_state()
        self.network = podman.create_network(f"rayfleet-rehearsal-{self.rid}", self.rid)
        try:
            self.moto = Moto(opts.port, gateway=self.network["gateway"])
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise RehearsalError(
                    f"port {opts.port} is already taken (another rehearsal? `rayfleet rehearse down`); "
                    "pick a free one with PORT=<n>, or leave it out for any free port"
                ) from None
            raise
        self.moto.region = opts.picture.get("region", "us-east-1")
        endpoint = opts.container_endpoint or f"http://{self.network['gateway']}:{self.moto.port}"
        self._write_state(moto_port=self.moto.port, network=self.network["name"], endpoint=endpoint)
        say(
            f"moto on {' and '.join(f'{h}:{self.moto.port}' for h in self.moto.hosts)} (containers: {endpoint}); "
            f"network {self.network['name']} {self.network['subnet']}"
        )
        self._check_reachable(endpoint)
        deployed = deploy(self.moto, opts.picture, opts.state_dir)
        outputs_file = Path(deployed["outputs_file"])
        # The verbs' keys (`env`): the operator's, as on AWS; the inspector's for a test's own look at moto.
        # moto's keys only, in the state file as the test keys were before (only its owner reads it).
        self._write_state(
            outputs=str(outputs_file),
            region=self.moto.region,
            credentials={name: self.moto.credentials_of(name) for name in ("operator", "inspector")},
        )
        say(
            f"deployment picture: {opts.picture.get('source', 'from a file')}; cluster {deployed['cluster']}, "
            f"services {', '.join(deployed['services'])}, Cloud Map {opts.picture['namespace']['name']}, "
            f"bucket {opts.picture['bucket']['name']}"
        )
        host = self.host = opts.host or Host.here()
        adaptation = Adaptation.plan(opts.picture, host)
        say(adaptation.line(opts.picture))
        extra_env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_REGION": self.moto.region,
            "AWS_DEFAULT_REGION": self.moto.region,
            **SIGNED_PLAIN,
        }
        # Nothing of this host is mounted: a recipe's data reaches the containers as on ECS, staged to S3.
        say(
            f"added: AWS_ENDPOINT_URL={endpoint} in every container; each task gets its task role's keys "
            "(IAM enforced: the rendered policies; the verbs act as the operator)"
        )
        log_dir = opts.state_dir / "logs"  # each container's output, as shipped to CloudWatch Logs
        shutil.rmtree(log_dir, ignore_errors=True)
        log_dir.mkdir()
        found = store_of(opts.picture)
        if found:
            name, port, bundle_at = found
            token = deployed["gcs_store_token"] or ""
            self.store = GcsStore(name, port, bundle_at, self.network["gateway"], token, opts.state_dir / "store")
            say(self.store.line())
        self.agent = Agent(
            self.moto, deployed, adaptation, self.rid, self.network, extra_env, log_dir, stand_in=self.store
        )
        self.deployed = deployed

    def _apply_pending(self) -> None:
        """A picture `python -m tools.rehearsal apply` left for this rehearsal (tools/rehearsal/reapply.py)."""
        picture = reapply.pending(self.opts.state_dir)
        if picture is None:
            return
        try:
            say(reapply.apply(self, picture))
            self._write_state(applied=picture.get("source", "a picture"), apply_error=None)
        except Exception as exc:  # the rehearsal goes on with what it ran; the verb says why
            say(f"could not apply {picture.get('source', 'the picture')}: {exc}")
            self._write_state(apply_error=f"{type(exc).__name__}: {exc}")
        finally:
            reapply.taken(self.opts.state_dir)  # after the outcome: the verb waits for the file to go

    def _check_reachable(self, endpoint: str) -> None:
        image = self.opts.picture["taskDefinitions"]["head"]["containerDefinitions"][0]["image"]
        probe = podman.podman(
            "run",
            "--rm",
            "--label",
            f"{podman.LABEL}={self.rid}",
            "--network",
            self.network["name"],
            "--entrypoint",
            "python",
            image,
            "-c",
            f"import urllib.request; urllib.request.urlopen('{endpoint}/moto-api/', timeout=5)",
            check=False,
            timeout=120,
        )
        if probe.returncode != 0:
            raise RehearsalError(
                f"moto at {endpoint} is not reachable from the containers (a firewall on the podman bridge?): "
                + (probe.stderr.strip().splitlines() or ["no answer"])[-1]
            )

    def _head_container(self) -> str | None:
        for run in self.agent.live(key="head"):
            if run.status == "RUNNING":
                return next(c.podman_name for c in run.containers.values() if c.essential)
        return None

    def ray_nodes(self) -> list[str] | None:
        """States of the Ray nodes as the head's dashboard lists them (None while it cannot answer)."""
        head = self._head_container()
        if head is None:
            return None
        env = {
            e["name"]: e["value"]
            for e in self.opts.picture["taskDefinitions"]["head"]["containerDefinitions"][0].get("environment", [])
        }
        port = json.loads(env.get("RAYFLEET_RAY_PORTS", "{}")).get("dashboard", {}).get("from", 8265)
        result = podman.podman("exec", head, "python", "-c", NODES_SCRIPT.format(port=port), check=False, timeout=30)
        if result.returncode != 0:
            return None
        try:
            return json.loads(result.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            return None

    def _wait_for_cluster(self) -> None:
        services = self.opts.picture["services"]
        want = 1 + sum(s["desiredCount"] for s in services if s["taskDefinition"].startswith("worker"))
        started = time.monotonic()
        last_check = 0.0
        seen = None
        while True:
            self.agent.step()
            now = time.monotonic()
            if now - last_check > 5:
                last_check = now
                nodes = self.ray_nodes()
                alive = sum(1 for n in nodes or [] if n == "ALIVE")
                if nodes is not None and alive != seen:
                    say(f"Ray: {alive} of {want} nodes alive (head + workers)")
                    seen = alive
                if alive >= want:
                    say(
                        f"cluster formed in {now - started:.0f}s: head + {want - 1} workers, token auth from the secret"
                    )
                    return
            if now - started > self.opts.ready_timeout:
                raise RehearsalError(
                    f"the cluster did not form within {self.opts.ready_timeout:.0f}s "
                    f"({seen or 0} of {want} Ray nodes); "
                    f"container logs are in {self.opts.state_dir / 'logs'}"
                )
            time.sleep(2)

    def _ready(self, ready) -> None:
        state = read_state(self.opts.state_dir) or {}
        self._write_state(ready=True)
        say("ready. In another shell, point the laptop verbs at it and use them as on ECS:")
        print(
            f'  eval "$({_python()} -m tools.rehearsal env)"   # or: '
            + " ".join(f"{k}={v}" for k, v in environment(state).items()),
            flush=True,
        )
        print(
            '  make train-ddp TARGET=ecs ARGS="epochs=2 train_subset=600 test_subset=200"; make status; make stop',
            flush=True,
        )
        say("Ctrl-C (or `rayfleet rehearse down`) stops everything")
        if ready is not None:
            ready(self)

    def _write_state(self, **fields) -> None:
        state = read_state(self.opts.state_dir) or {}
        if state.get("rid") != self.rid:
            state = {}
        state.update(pid=os.getpid(), rid=self.rid, state_dir=str(self.opts.state_dir), **fields)
        self.opts.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.chmod(0o600)  # it holds moto's keys of the operator and the inspector
        tmp.replace(self.state_path)

    # -- down --------------------------------------------------------------------------------------------
    def teardown(self) -> None:
        started = self.network is not None or self.moto is not None
        if self.agent is not None:
            self.agent.close()
        removed = podman.remove_everything(self.rid) if podman.installed() else []
        if self.moto is not None:
            self.moto.stop()
        if self.store is not None:
            self.store.stop()
        state = read_state(self.opts.state_dir)
        if state and state.get("rid") == self.rid:
            self.state_path.unlink(missing_ok=True)
        if started:
            pods = sum(1 for r in removed if r.startswith("pod"))
            containers = sum(1 for r in removed if r.startswith("container"))
            network = "the network" if any(r.startswith("network") for r in removed) else "no network"
            say(
                f"stopped: {pods} task(s), {containers} container(s), {network}, moto"
                + (", the GCS store" if self.store is not None else "")
                + "; "
                "nothing of this rehearsal is left running"
            )


def _python() -> str:
    """This interpreter, as the user would type it from the repository (.venv/bin/python)."""
    path = Path(sys.executable)
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def interrupt(signum, frame):
    raise KeyboardInterrupt


def environment(state: dict, identity: str = "operator") -> dict[str, str]:
    """What the laptop verbs need to work against a running rehearsal: the operator's keys (IAM is enforced:
    infra/operator-policy.json); identity="inspector" for a test's own all-allowed look at moto."""
    if not state.get("outputs") or identity not in state.get("credentials", {}):
        raise RehearsalError("no rehearsal is running (start one with `rayfleet rehearse up`)")
    return {
        "RAYFLEET_OUTPUTS": state["outputs"],
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{state['moto_port']}",
        "AWS_DEFAULT_REGION": state.get("region", "us-east-1"),
        "AWS_REGION": state.get("region", "us-east-1"),
        "AWS_SESSION_TOKEN": "",  # none for an IAM user: a token of the shell's own would be sent with its keys
        **SIGNED_PLAIN,
        **state["credentials"][identity],
    }


def down(state_dir: Path = STATE_DIR, everything: bool = False, wait_s: float = 180) -> str:
    """Stop the running rehearsal (SIGTERM, then its own cleanup) and remove anything a killed one left."""
    state = read_state(state_dir)
    said = []
    if state and _alive(state.get("pid", -1)) and state.get("pid") != os.getpid():
        os.kill(state["pid"], signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while _alive(state["pid"]) and time.monotonic() < deadline:
            time.sleep(0.5)
        if _alive(state["pid"]):
            os.kill(state["pid"], signal.SIGKILL)
            said.append(f"killed rehearsal pid {state['pid']} (it did not stop within {wait_s:.0f}s)")
        else:
            said.append(f"stopped the rehearsal (pid {state['pid']})")
    removed = (
        podman.remove_everything(None if everything else (state or {}).get("rid"))
        if podman.installed() and (state or everything)
        else []
    )
    if removed:
        said.append(f"removed what was left: {', '.join(removed)}")
    (state_dir / "state.json").unlink(missing_ok=True)
    return "; ".join(said) or "no rehearsal running; nothing to stop"
