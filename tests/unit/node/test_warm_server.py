"""The fork server and its launcher as real processes (no Ray): a forked worker gets exactly what a fresh
process would (its arguments, environment, working directory, streams, sys.path, thread count, random
state), sees nothing of an earlier fork, and anything the server cannot make equal runs as a fresh process.

One server for the module, preloading numpy and torch (the heavy part of the default list)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rayfleet.core.warm_workers import PRELOAD_ENV, SOCKET_ENV
from rayfleet.node import warm_server

REPO = Path(__file__).resolve().parents[3]
# What the worker script reports; it runs once as a fork and once as a fresh process in some tests.
FACTS = textwrap.dedent(
    """
    import json, os, random, signal, sys, threading, time
    start = {"torch": "torch" in sys.modules, "numpy": "numpy" in sys.modules,
             "rayfleet": sorted(m for m in sys.modules if m.split(".")[0] == "rayfleet")}
    os.environ["OMP_NUM_THREADS"] = "1"  # what Ray does in a worker before its first task imports torch
    import numpy, torch
    threads = []
    t = threading.Thread(target=lambda: threads.append(torch.get_num_threads())); t.start(); t.join()
    facts = {
        "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "argv": sys.argv, "cwd": os.getcwd(),
        "path": sys.path[:2], "start": start, "leak_env": os.environ.get("LEAK"),
        "leak_module": getattr(numpy, "LEAK", None), "asked": os.environ.get("ASKED"),
        "threads_main": torch.get_num_threads(), "threads_new": threads[0],
        "numpy_draw": numpy.random.randint(1 << 30), "python_draw": random.randint(0, 1 << 30),
        "torch_seed": torch.initial_seed(),
        "stdout": [sys.stdout.line_buffering, sys.stdout.write_through, sys.stdout.encoding],
        "stderr": [sys.stderr.line_buffering, sys.stderr.write_through],
    }
    print(json.dumps(facts), flush=True)
    if "--leak" in sys.argv:  # what a run could leave behind in its process
        os.environ["LEAK"] = "1"
        numpy.LEAK = 1
    if "--wait" in sys.argv:
        # os.write, not print: the signal can land while print("waiting") is still inside the buffered stream
        signal.signal(signal.SIGTERM, lambda *_: (os.write(1, b"term\\n"), os._exit(7)))
        print("waiting", flush=True)
        time.sleep(60)
    sys.exit(3)
    """
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("warm")
    sock = base / "w.sock"
    env = {**os.environ, PRELOAD_ENV: "numpy,torch", "PYTHONPATH": str(REPO)}
    env.pop("OMP_NUM_THREADS", None)
    env.pop("PYTHONUNBUFFERED", None)
    env = {k: v for k, v in env.items() if not k.startswith("TORCH")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rayfleet.node.warm_server", str(sock)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=base,
    )
    assert "ready on" in proc.stdout.readline()  # after the preload: seconds, bounded by the module's timeout
    script = base / "worker" / "facts.py"
    script.parent.mkdir()
    script.write_text(FACTS)
    try:
        yield {"pid": proc.pid, "env": {**env, SOCKET_ENV: str(sock)}, "script": script, "base": base}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def launch(server, *args, env=None, cwd=None, **popen):
    command = [sys.executable, "-m", "rayfleet.node.warm_client", str(server["script"]), *args]
    return subprocess.Popen(
        command,
        env=env or {**server["env"], "ASKED": "yes"},
        cwd=cwd or server["base"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def gone(ended, timeout_s: float = 60) -> bool:
    """Whether `ended()` holds within the deadline (a process the server or its end should remove)."""
    deadline = time.monotonic() + timeout_s
    while not ended() and time.monotonic() < deadline:
        time.sleep(0.1)
    return ended()


def facts_of(proc) -> tuple[dict, str, int]:
    out, err = proc.communicate(timeout=120)
    return json.loads(out.splitlines()[0]), err, proc.returncode


def test_a_worker_is_a_fork_with_its_own_arguments_environment_directory_and_streams(server, tmp_path):
    facts, err, code = facts_of(launch(server, "a", "b", cwd=tmp_path))
    assert err == "" and code == 3  # its exit status, through the launcher
    assert facts["ppid"] == server["pid"] and facts["start"]["torch"] and facts["start"]["numpy"]  # forked, warm
    assert facts["pgid"] == facts["pid"]  # its own process group: Ray kills a finished worker's whole group
    assert facts["argv"] == [str(server["script"]), "a", "b"] and facts["cwd"] == str(tmp_path)
    assert facts["asked"] == "yes"
    assert facts["path"] == [str(server["script"].parent), str(REPO)]  # as `python script` with its PYTHONPATH
    assert facts["start"]["rayfleet"] == []  # the server's own package is the worker's to import, from its path


@pytest.mark.parametrize("unbuffered", [False, True])
def test_a_fork_gets_the_thread_count_and_standard_streams_a_fresh_process_gets(server, unbuffered):
    env = {**server["env"], **({"PYTHONUNBUFFERED": "1"} if unbuffered else {})}
    fork, _, _ = facts_of(launch(server, env=env))
    fresh = subprocess.run(
        [sys.executable, str(server["script"])], env=env, capture_output=True, text=True, timeout=120
    )
    fresh = json.loads(fresh.stdout.splitlines()[0])
    assert fork["ppid"] == server["pid"] and not fresh["start"]["torch"]
    # torch's runtimes read OMP_NUM_THREADS when loaded: the fork applies the value the worker set later
    assert (fork["threads_main"], fork["threads_new"]) == (fresh["threads_main"], fresh["threads_new"]) == (1, 1)
    # Python sets its streams up at start: the fork rebuilds them for its own descriptors and environment
    assert fork["stdout"] == fresh["stdout"] and fork["stderr"] == fresh["stderr"]
    assert fork["stdout"][1] is unbuffered


def test_a_second_fork_sees_nothing_the_first_left_in_its_process(server):
    first, _, _ = facts_of(launch(server, "--leak"))
    second, _, _ = facts_of(launch(server))
    assert first["ppid"] == second["ppid"] == server["pid"] and first["pid"] != second["pid"]
    assert second["leak_env"] is None and second["leak_module"] is None
    # Each fork draws its own random numbers, as fresh processes do: NumPy's and torch's default generators
    # are seeded from fresh entropy, Python's reseeds itself on fork.
    assert first["numpy_draw"] != second["numpy_draw"] and first["python_draw"] != second["python_draw"]
    assert first["torch_seed"] != second["torch_seed"]


def test_a_worker_that_asks_for_another_import_time_environment_starts_fresh(server):
    facts, err, code = facts_of(launch(server, env={**server["env"], "TORCH_LOGS": "+dynamo"}))
    assert "a fresh process for this worker: TORCH_LOGS differ from the fork server's" in err
    assert facts["ppid"] == os.getpid() and not facts["start"]["torch"] and code == 3  # exec'd by the launcher


def test_without_a_fork_server_the_worker_starts_fresh(server, tmp_path):
    facts, err, code = facts_of(launch(server, env={**server["env"], SOCKET_ENV: str(tmp_path / "none.sock")}))
    assert "no fork server at" in err and facts["ppid"] == os.getpid() and code == 3


def test_signals_reach_the_worker_and_it_dies_with_its_launcher(server):
    waiting = launch(server, "--wait")
    facts = json.loads(waiting.stdout.readline())
    assert waiting.stdout.readline().strip() == "waiting"  # its own handler is in place
    waiting.send_signal(signal.SIGTERM)  # Ray stops a worker it started this way
    assert waiting.stdout.readline().strip() == "term" and waiting.wait(timeout=60) == 7

    orphan = launch(server, "--wait")
    worker = json.loads(orphan.stdout.readline())["pid"]
    assert orphan.stdout.readline().strip() == "waiting"
    orphan.kill()  # the launcher dies first: the server kills its worker
    orphan.wait(timeout=60)
    assert gone(lambda: not Path(f"/proc/{worker}").exists()) and facts["ppid"] == server["pid"]


def test_a_stop_signal_during_the_launch_is_not_lost(server, monkeypatch):
    """SIGTERM can reach the launcher before the server has told it the worker's pid: it is passed on then."""
    from rayfleet.node import warm_client

    seen = []
    monkeypatch.setattr(warm_client.os, "kill", lambda pid, signum: seen.append((pid, signum)))
    real_recv = warm_client.recv_message
    replies = []

    def recv_then_signal(sock):
        reply = real_recv(sock)
        if not replies:  # the stop arrives while the pid's reply is on its way
            signal.raise_signal(signal.SIGTERM)
        replies.append(reply)
        return reply

    monkeypatch.setattr(warm_client, "recv_message", recv_then_signal)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    # launched from this process: its environment must match the server's, which the fixture started without
    # TORCH* (an earlier test in this process may have run torch.compile, and Inductor sets its cache directory
    # in os.environ; the server then declines the launch: "TORCHINDUCTOR_CACHE_DIR differ")
    for key in [k for k in os.environ if k.startswith("TORCH")]:
        monkeypatch.delenv(key)
    previous = signal.getsignal(signal.SIGTERM)
    previous_int = signal.getsignal(signal.SIGINT)
    try:
        warm_client.forked(server["env"][SOCKET_ENV], [str(server["script"])])
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    assert seen == [(replies[0]["pid"], signal.SIGTERM)]


def test_the_server_refuses_a_preload_that_imports_ray(tmp_path):
    sock = tmp_path / "w.sock"
    env = {**os.environ, PRELOAD_ENV: "ray"}
    result = subprocess.run(
        [sys.executable, "-m", "rayfleet.node.warm_server", str(sock)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 1 and "the preload modules imported ray" in result.stderr and not sock.exists()


def test_the_preload_refuses_a_cuda_context(monkeypatch):
    class Cuda:
        @staticmethod
        def is_initialized():
            return True

    fake = type(sys)("torch")
    fake.cuda = Cuda
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    with pytest.raises(RuntimeError, match="initialized CUDA"):
        warm_server.preload([])


def test_a_server_started_with_its_parent_ends_with_it(tmp_path):
    """An image's node starts its server so (rayfleet/node/ray_node.py); a node killed outright leaves none."""
    sock = tmp_path / "w.sock"
    parent = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from rayfleet.node import warm_server
        server, _ = warm_server.spawn(Path({str(sock)!r}), {{**os.environ, {PRELOAD_ENV!r}: "json"}}, with_parent=True)
        while not Path({str(sock)!r}).exists():
            time.sleep(0.05)
        print(server.pid, flush=True)
        os._exit(0)
        """
    )
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60, cwd=REPO)
    server = Path(f"/proc/{int(done.stdout.split()[-1])}")  # after the server's own "ready" line
    assert gone(lambda: not server.exists() or b"warm_server" not in (server / "cmdline").read_bytes())
    assert not sock.exists()  # it stopped as asked, and cleaned up
