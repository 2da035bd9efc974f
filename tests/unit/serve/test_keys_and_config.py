"""Where the API key comes from, and the serving config's checks."""

from __future__ import annotations

import pytest

from rayfleet.core.config import load_config
from rayfleet.core.errors import ConfigError
from rayfleet.serve.config import ServeConfig
from rayfleet.serve.keys import ENV, KeyMissing, KeySource, ensure_key_file, matches, replica_key


def test_the_key_comes_from_the_environment_first_then_a_private_file(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    path = ensure_key_file(tmp_path / "serve" / "api_key")
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    key = KeySource(str(path)).read()
    assert len(key) >= 32 and ensure_key_file(path).read_text().strip() == key  # made once, then kept
    monkeypatch.setenv(ENV, "from-the-environment-1234")
    assert KeySource(str(path)).read() == "from-the-environment-1234"


def test_no_key_a_short_key_or_a_readable_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(KeyMissing, match="does not exist"):
        KeySource(str(tmp_path / "none")).read()
    with pytest.raises(KeyMissing, match="refusing to serve"):
        KeySource().read()
    readable = tmp_path / "key"
    readable.write_text("x" * 40)
    readable.chmod(0o644)
    with pytest.raises(KeyMissing, match="chmod 600"):
        KeySource(str(readable)).read()
    monkeypatch.setenv(ENV, "short")
    with pytest.raises(KeyMissing, match="at least 16"):
        KeySource().read()


def test_a_replica_checks_its_key_unless_the_spec_says_the_gate_does(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(KeyMissing, match="refusing to serve"):
        replica_key(None, gated=False)  # no key and no gate: no replica, never an open endpoint
    assert replica_key(None, gated=True) is None
    path = ensure_key_file(tmp_path / "api_key")
    assert replica_key(str(path), gated=False) == KeySource(str(path))


def test_the_header_must_be_bearer_and_the_exact_key():
    key = "a" * 20
    assert matches(f"Bearer {key}", key) and matches(f"bearer {key}", key)
    assert not any(matches(h, key) for h in (None, "", key, f"Basic {key}", f"Bearer {key}x", "Bearer "))


def test_the_config_refuses_contradictions_with_one_line_per_key(tmp_path):
    bad = [
        (["replicas=2", "autoscaling.max_replicas=3"], "replicas and autoscaling"),
        (["autoscaling.min_replicas=3", "autoscaling.max_replicas=2"], r"autoscaling: min_replicas \(3\) is above"),
        (["engine=vllm", "gpus_per_replica=1", "tensor_parallel_size=2"], "gpus_per_replica >= tensor_parallel_size"),
        (["engine=transformers", "tensor_parallel_size=2"], "needs engine: vllm"),
        (["replicas=0"], "replicas"),
        (["port=80"], "port"),
        (["replica=2"], "replica: unknown key"),
    ]
    for overrides, words in bad:
        with pytest.raises(ConfigError, match=words):
            load_config(ServeConfig, None, overrides)


def test_the_config_becomes_serve_options_and_an_engine():
    fixed = load_config(ServeConfig, None, ["replicas=2", "cpus_per_replica=0.5"])
    assert fixed.deployment_options() == {
        "ray_actor_options": {"num_cpus": 0.5, "num_gpus": 0},
        "max_ongoing_requests": 8,
        "max_constructor_retry_count": 2,
        "num_replicas": 2,
    }
    scaled = load_config(ServeConfig, None, ["autoscaling.max_replicas=4", "gpus_per_replica=1"])
    assert scaled.deployment_options()["autoscaling_config"] == {
        "min_replicas": 1,
        "max_replicas": 4,
        "target_ongoing_requests": 2.0,
    }
    assert "num_replicas" not in scaled.deployment_options()
    assert scaled.resolved_engine() == "vllm" and fixed.resolved_engine() == "transformers"
