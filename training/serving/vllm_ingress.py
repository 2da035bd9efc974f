"""Ray Serve LLM's OpenAI ingress behind rayfleet's API key (imported only where vLLM is installed)."""

from __future__ import annotations

from ray.serve.llm.ingress import OpenAiIngress

from training.serving.http import RequireKey
from training.serving.keys import KeySource


class KeyedOpenAiIngress(OpenAiIngress):
    def __init__(self, llm_deployments, model_cards, lora_paths=None, *, api_key_file: str | None = None, **kwargs):
        super().__init__(llm_deployments, model_cards, lora_paths=lora_paths, **kwargs)
        source = KeySource(api_key_file)
        source.read()  # no key, no replica
        # The ingress app is built before this runs; Starlette rebuilds its middleware stack when it is reset
        # (what Ray Serve LLM itself does to add its own).
        self.app.middleware_stack = None
        self.app.add_middleware(RequireKey, source=source)
