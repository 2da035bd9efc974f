"""rayfleet/core/aws.py's shared clients: one per service, region, endpoint and credential chain."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from rayfleet.core.aws import shared_client


def test_the_same_client_comes_back_until_the_chain_changes(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    with ThreadPoolExecutor(4) as pool:  # made once even when threads ask at the same moment
        clients = list(pool.map(lambda _: shared_client("s3", "us-east-1"), range(8)))
    assert all(c is clients[0] for c in clients)
    assert clients[0].meta.endpoint_url == "http://127.0.0.1:1"
    assert shared_client("s3", "eu-west-1") is not clients[0]
    assert shared_client("s3", "us-east-1", "http://127.0.0.1:2").meta.endpoint_url == "http://127.0.0.1:2"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:3")  # another test's moto: another client
    moved = shared_client("s3", "us-east-1")
    assert moved is not clients[0] and moved.meta.endpoint_url == "http://127.0.0.1:3"
