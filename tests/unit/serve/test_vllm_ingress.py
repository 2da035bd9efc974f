"""The vLLM path's ingress built and started the way Ray 2.60 does it, without a cluster: Ray Serve LLM's
`make_fastapi_ingress` (what `build_openai_app` calls) wraps the class from our serving args in `serve.ingress`,
and Serve's own replica code (`UserCallableWrapper`, as local testing mode uses it) constructs it and hands back
the ASGI app it serves. vLLM is not installed here: a stand-in answers only the imports of `vllm.*` (protocol
models, exception types), so everything of Ray's and ours runs as it does in the ray-worker-llm image."""

from __future__ import annotations

import asyncio
import gc
import importlib.abc
import importlib.machinery
import sys
import time
import types
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict

from rayfleet.serve.app import ServeArgs
from rayfleet.serve.config import ServeConfig
from rayfleet.serve.keys import ENV, KeyMissing
from rayfleet.serve.vllm_app import serving_args

KEY = "v" * 24
# Serve's ingress wrapper has an `async def __del__` (Serve awaits it itself, call_destructor below): the
# garbage collector's call of it makes a coroutine nobody awaits.
pytestmark = pytest.mark.filterwarnings("ignore:coroutine .*__del__' was never awaited:RuntimeWarning")


class _VllmModule(types.ModuleType):
    """A `vllm.*` module whose every name is a permissive pydantic model (the protocol classes Ray subclasses)
    or, for `...Error` names, an exception type (what Ray catches)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name.endswith("Error"):
            value = type(name, (Exception,), {"__module__": self.__name__})
        else:
            config = ConfigDict(extra="allow", arbitrary_types_allowed=True)
            value = type(name, (BaseModel,), {"model_config": config, "__module__": self.__name__})
        setattr(self, name, value)
        return value


class _VllmFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "vllm" or fullname.startswith("vllm."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _VllmModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


OURS = ("vllm", "ray.llm", "ray.serve.llm", "rayfleet.serve.vllm_ingress")


@pytest.fixture(scope="module")
def ray_llm():
    """Ray Serve LLM's modules, imported against the vLLM stand-in; afterwards no module that saw it is left."""
    finder = _VllmFinder()
    sys.meta_path.insert(0, finder)
    try:
        from ray.llm._internal.serve.core.configs.openai_api_models import ModelCard
        from ray.llm._internal.serve.core.ingress.builder import IngressClsConfig
        from ray.llm._internal.serve.core.ingress.ingress import make_fastapi_ingress

        yield IngressClsConfig, make_fastapi_ingress, ModelCard
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n.split(".")[0] == "vllm" or n.startswith(OURS)]:
            del sys.modules[name]


@contextmanager
def replica_app(ray_llm, spec: ServeArgs):
    """What build_openai_app and a Serve replica do with our serving args: the app the replica serves."""
    from ray.serve import context
    from ray.serve._private.common import DeploymentID, ReplicaID
    from ray.serve._private.config import DeploymentConfig
    from ray.serve._private.replica import UserCallableWrapper

    ingress_config, make_fastapi_ingress, model_card = ray_llm
    config = ingress_config.model_validate(serving_args(spec)["ingress_cls_config"])  # the class from its path
    ingress_cls = make_fastapi_ingress(config.ingress_cls)  # serve.ingress(app)(a subclass of ours)
    card = model_card(id=spec.run_name, object="model", owned_by="rayfleet", permission=[], metadata={})
    kwargs = {"llm_deployments": {spec.run_name: None}, "model_cards": {spec.run_name: card}, "lora_paths": {}}
    deployment_id = DeploymentID(name="OpenAiIngress", app_name="rayfleet")
    replica = UserCallableWrapper(
        ingress_cls,
        (),
        {**kwargs, **config.ingress_extra_kwargs},
        deployment_id=deployment_id,
        run_sync_methods_in_threadpool=False,
        run_user_code_in_separate_thread=True,
        local_testing_mode=True,
        deployment_config=DeploymentConfig(),
        actor_id="local",
    )
    try:
        app = replica.initialize_callable().result(timeout=60)
        # A replica's routes find their instance through the replica context, which the replica sets once it runs.
        context._set_internal_replica_context(
            replica_id=ReplicaID(unique_id="local", deployment_id=deployment_id),
            servable_object=replica.user_callable,
            _deployment_config=DeploymentConfig(),
            rank=None,
            world_size=1,
        )
        yield app
    finally:
        context._INTERNAL_REPLICA_CONTEXT = None
        replica.call_destructor().result(timeout=60)  # the app's lifespan ends, as when Serve stops a replica
        loop = replica.event_loop
        asyncio.run_coroutine_threadsafe(_cancel_the_rest(), loop).result(timeout=60)
        loop.call_soon_threadsafe(loop.stop)
        deadline = time.monotonic() + 60
        while loop.is_running() and time.monotonic() < deadline:
            time.sleep(0.01)
        loop.close()


async def _cancel_the_rest() -> None:
    """Serve's event-loop monitor, which runs until the replica's process ends."""
    rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


@pytest.fixture(autouse=True)
def collected_here():
    """The ingress instances a test made are collected in its teardown, where the filter above applies."""
    yield
    gc.collect()


@pytest.fixture
def spec(tmp_path):
    cfg = ServeConfig(gpus_per_replica=1)
    return ServeArgs(storage=str(tmp_path), run_name="lm", kind="llm", folder="export", config=cfg)


def test_the_ingress_starts_and_refuses_requests_without_the_key(ray_llm, spec, monkeypatch):
    """Finding 6: the key check is on the app Serve serves, and a request with the key reaches the route."""
    monkeypatch.setenv(ENV, KEY)
    with replica_app(ray_llm, spec) as app:
        client = TestClient(app)
        for path in ("/v1/models", "/v1/models/lm"):
            refused = client.get(path, headers={"Authorization": "Bearer not-the-key-at-all"})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
            assert client.get(path).status_code == 401
        assert client.post("/v1/completions", json={"model": "lm", "prompt": "x"}).status_code == 401
        served = client.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        assert served.status_code == 200 and [m["id"] for m in served.json()["data"]] == ["lm"]


def test_without_a_key_no_replica_starts(ray_llm, spec, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(KeyMissing, match="refusing to serve"), replica_app(ray_llm, spec):
        pass


def test_gated_the_replica_holds_no_key_and_leaves_the_check_to_the_gate(ray_llm, spec, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with replica_app(ray_llm, spec.model_copy(update={"gated": True})) as app:
        assert TestClient(app).get("/v1/models").status_code == 200
