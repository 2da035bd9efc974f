"""The rehearsal's moto answers on loopback and on its network's gateway, and on no other address."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from tools.rehearsal.cloud import Moto

GATEWAY = "10.231.77.1"  # an address no interface has: bound with IP_FREEBIND, as before the bridge exists


def outward_address() -> str:
    """This machine's address towards other hosts (the UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.123", 9))
        return probe.getsockname()[0]


@pytest.fixture(scope="module")
def moto():
    server = Moto(0, gateway=GATEWAY)
    yield server
    server.stop()


def test_moto_answers_on_loopback(moto):
    with urllib.request.urlopen(f"{moto.url}/moto-api/", timeout=10) as response:
        assert response.status == 200
    assert moto.hosts == ["127.0.0.1", GATEWAY]


def test_a_connection_from_another_address_is_refused(moto):
    """Before the fix moto listened on 0.0.0.0: this connection was accepted."""
    address = outward_address()
    assert not address.startswith("127."), address
    with pytest.raises(ConnectionRefusedError), socket.create_connection((address, moto.port), timeout=5):
        pass


def test_a_taken_port_is_eaddrinuse():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError) as caught:
            Moto(taken.getsockname()[1], gateway=GATEWAY)
    assert caught.value.errno == 98
