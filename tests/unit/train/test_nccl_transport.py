"""The network NCCL chose, read from NCCL's own log lines (rayfleet/train/control/nccl_transport.py). The lines
are as NCCL 2.2x and aws-ofi-nccl print them (quoted from their logs in NVIDIA/nccl#1597, aws/aws-ofi-nccl#24
and #889); only a real EFA instance shows NCCL choosing EFA itself."""

from __future__ import annotations

import pytest

from rayfleet.train.control import nccl_transport

EFA_NEW = [
    "8h200-2:6831:6840 [0] NCCL INFO NET/OFI Support for DMA-BUF registrations: false",
    "8h200-2:6831:6840 [0] NCCL INFO Using network Libfabric",
    "8h200-3:6310:6318 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)",
]
EFA_OLD = [
    "ip-172-32-38-1:21471:21471 [7] NCCL INFO NET/OFI Selected Provider is efa",
    "NCCL INFO Using network AWS Libfabric",
]
OFI_TCP = ["h:1:1 [0] NCCL INFO Using network Libfabric", "h:1:1 [0] NCCL INFO NET/OFI Selected provider is tcp"]
SOCKET = [
    "ip-10-36-29-253:79:79 [0] NCCL INFO NET/Plugin: Failed to find ncclCollNetPlugin_v8 symbol.",
    "ip-10-36-29-253:79:79 [0] NCCL INFO NET/Socket : Using [0]eth0:10.36.29.253<0>",
    "ip-10-36-29-253:79:79 [0] NCCL INFO Using network Socket",
]


@pytest.mark.parametrize(
    ("lines", "transport"),
    [
        (EFA_NEW, "efa"),
        (EFA_OLD, "efa"),
        (OFI_TCP, "libfabric/tcp"),
        (SOCKET, "socket"),
        (["NCCL INFO Using network IB"], "ib"),
        ([], None),
    ],
)
def test_the_transport_is_read_from_nccls_own_lines(lines, transport):
    assert nccl_transport.chosen(lines) == transport


def test_an_efa_node_whose_nccl_chose_tcp_stops_in_one_line_unless_allowed():
    efa = {"FI_PROVIDER": "efa"}
    why = nccl_transport.problem("socket", efa, over_tcp_ok=False)
    assert why is not None and "\n" not in why
    assert why.startswith("NCCL chose socket, not EFA, on a worker group with EFA") and "nccl_over_tcp=true" in why
    assert nccl_transport.problem(None, efa, over_tcp_ok=False).startswith("NCCL chose an unknown transport")
    assert nccl_transport.problem("efa", efa, over_tcp_ok=False) is None
    assert nccl_transport.problem("socket", efa, over_tcp_ok=True) is None  # the job said TCP is fine
    assert nccl_transport.problem("socket", {}, over_tcp_ok=False) is None  # no EFA on this group: nothing to miss


def test_the_workers_log_nccls_choice_unless_the_job_set_its_own_logging(tmp_path):
    env = nccl_transport.worker_env("run-1", {})
    assert env == {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": "/tmp/rayfleet-nccl/run-1.%h.%p.log",
    }
    assert nccl_transport.worker_env("run-1", {"NCCL_DEBUG": "WARN"}) == {}
    # each rank reads only its own process's file (%p), whatever the host (%h)
    (tmp_path / "run-1.node-a.41.log").write_text("\n".join(SOCKET) + "\n")
    (tmp_path / "run-1.node-a.42.log").write_text("\n".join(EFA_NEW) + "\n")
    files = {"NCCL_DEBUG_FILE": f"{tmp_path}/run-1.%h.%p.log"}
    assert nccl_transport.chosen(nccl_transport.own_log(files, 42)) == "efa"
    assert nccl_transport.chosen(nccl_transport.own_log(files, 41)) == "socket"
    assert nccl_transport.own_log({}, 42) == []


def test_only_a_gpu_runs_workers_log_nccl():
    from rayfleet.train import fit

    assert "NCCL_DEBUG" not in fit.worker_env_vars("run-1", use_gpu=False)
    on_gpus = fit.worker_env_vars("run-1", use_gpu=True)
    assert on_gpus["NCCL_DEBUG_FILE"] == "/tmp/rayfleet-nccl/run-1.%h.%p.log"
    assert on_gpus["RAY_TRAIN_ENABLE_PRINT_PATCH"] == "0"
