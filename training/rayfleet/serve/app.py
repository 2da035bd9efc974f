"""The Ray Serve application the verbs deploy: `import_path: rayfleet.serve.app:build`, `args` below.

One deployment holds the model (its replicas, CPUs, GPUs and autoscaling from ServeConfig) and answers HTTP
itself (FastAPI ingress): /v1/completions, /v1/chat/completions and /v1/models for a language model,
/v1/classify for a DDP run. Every request needs the API key (keys.py): checked here, or by the serve gate in
front of Serve when the verbs say `gated` (ECS). The replica reads the run's files
from its storage, local or s3://, when it starts; a run that does not load fails the deployment, which
`make serve` reports.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Literal

from fastapi import Request
from ray import serve

from rayfleet.core.config import StrictModel
from rayfleet.core.run_dir import RunDir
from rayfleet.serve.config import ServeConfig
from rayfleet.serve.http import api_app, parse
from rayfleet.serve.keys import replica_key

DEPLOYMENT = "model"


class ServeArgs(StrictModel):
    """What the verbs put in the Serve config's `args` (no secrets: the dashboard shows them)."""

    storage: str
    run_name: str
    kind: Literal["llm", "classifier"]
    folder: str
    endpoint_url: str | None = None
    region: str | None = None
    api_key_file: str | None = None
    # True only where the verbs put Serve's proxy on 127.0.0.1 behind rayfleet/node/serve/gate.py, which
    # checks the key on every route of the Serve port (ECS): the replicas then hold no key and check nothing.
    gated: bool = False
    config: ServeConfig = ServeConfig()

    def run_dir(self) -> RunDir:
        return RunDir(self.storage, self.run_name, self.endpoint_url, self.region)


@serve.ingress()
class LLMEndpoint:
    def __init__(self, args: dict):
        from rayfleet.serve.llm import TextGenerator

        spec = ServeArgs.model_validate(args)
        self.source = replica_key(spec.api_key_file, spec.gated)  # no key, no replica (unless gated)
        with tempfile.TemporaryDirectory() as scratch:
            folder = spec.run_dir().local_copy(spec.folder, Path(scratch))
            self.generator = TextGenerator(folder, spec.run_name, spec.config.max_tokens_limit)

    def __serve_build_asgi_app__(self):
        from rayfleet.serve.llm import ChatRequest, CompletionRequest

        app, generator = api_app(self.source), self.generator

        @app.post("/v1/completions")
        async def completions(request: Request):
            return await asyncio.to_thread(generator.complete, await parse(request, CompletionRequest))

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            return await asyncio.to_thread(generator.chat, await parse(request, ChatRequest))

        @app.get("/v1/models")
        async def models():
            return generator.models()

        return app


@serve.ingress()
class ClassifierEndpoint:
    def __init__(self, args: dict):
        from rayfleet.serve.classifier import ImageClassifier

        spec = ServeArgs.model_validate(args)
        self.source = replica_key(spec.api_key_file, spec.gated)
        run_dir = spec.run_dir()
        config = run_dir.read("config.yaml")
        if config is None:
            raise FileNotFoundError(f"{run_dir.display('config.yaml')} is missing: the job writes it at the start")
        with tempfile.TemporaryDirectory() as scratch:
            folder = run_dir.local_copy(spec.folder, Path(scratch))
            self.classifier = ImageClassifier(folder, config, spec.run_name)

    def __serve_build_asgi_app__(self):
        from rayfleet.serve.classifier import ClassifyRequest

        app, classifier = api_app(self.source), self.classifier

        @app.post("/v1/classify")
        async def classify(request: Request):
            return await asyncio.to_thread(classifier.classify, await parse(request, ClassifyRequest))

        return app


def build(args: dict):
    """Serve's application builder (the config's `args` arrive here)."""
    spec = ServeArgs.model_validate(args)
    if spec.kind == "llm" and spec.config.resolved_engine() == "vllm":
        from rayfleet.serve.vllm_app import build_vllm

        return build_vllm(spec)
    endpoint = LLMEndpoint if spec.kind == "llm" else ClassifierEndpoint
    options = spec.config.deployment_options()
    return serve.deployment(endpoint).options(name=DEPLOYMENT, **options).bind(spec.model_dump(mode="json"))
