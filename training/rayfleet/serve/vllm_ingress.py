"""Ray Serve LLM's OpenAI ingress behind rayfleet's API key.

The module imports anywhere (every Ray image carries the serve package); the class itself needs Ray Serve
LLM, which imports only where vLLM is installed, so it is built on first access (PEP 562 module
`__getattr__`): Ray Serve LLM resolves "rayfleet.serve.vllm_ingress:KeyedOpenAiIngress" by that access, in the
LLM worker image.

Ray Serve LLM wraps this class in `serve.ingress(app)` (`make_fastapi_ingress`), and Ray 2.60's wrapper runs
our `__init__` first and sets the app only after it: `self.app` does not exist in `__init__`. Serve calls
`__serve_build_asgi_app__` after both and serves what it returns, so the key's middleware goes on there,
before the app has started (Starlette refuses middleware after that).
"""

from __future__ import annotations

from functools import cache

from rayfleet.serve.http import RequireKey
from rayfleet.serve.keys import replica_key


@cache
def keyed_ingress_class() -> type:
    from ray.serve.llm.ingress import OpenAiIngress  # needs vLLM: see the module docstring

    class KeyedOpenAiIngress(OpenAiIngress):
        def __init__(
            self,
            llm_deployments,
            model_cards,
            *,
            lora_paths=None,
            api_key_file: str | None = None,
            gated: bool = False,
            **kwargs,
        ):
            super().__init__(llm_deployments, model_cards, lora_paths=lora_paths, **kwargs)
            self._key_source = replica_key(api_key_file, gated)  # no key, no replica (unless gated: ServeArgs)

        def __serve_build_asgi_app__(self):
            app = self.app  # the routes Ray Serve LLM put on its FastAPI app, set by the wrapper after __init__
            if self._key_source is not None:
                app.add_middleware(RequireKey, source=self._key_source)  # added last: runs first
            return app

    KeyedOpenAiIngress.__module__ = __name__
    KeyedOpenAiIngress.__qualname__ = "KeyedOpenAiIngress"  # where Ray finds it again, by its import path
    return KeyedOpenAiIngress


def __getattr__(name: str):
    if name == "KeyedOpenAiIngress":
        return keyed_ingress_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
