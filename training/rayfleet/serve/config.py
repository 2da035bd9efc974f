"""The serving config: a strict YAML file (recipes/serve.yaml) plus `key=value` overrides."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayfleet.core.config import StrictModel

CONSTRUCTOR_RETRIES = 2
# On ECS the serve gate (rayfleet/node/serve/gate.py) holds the Serve port and checks the key; Serve's own
# proxy listens behind it on 127.0.0.1 at this port, in the head task's network only. Neither one of Ray's ports
# (infra/catalog/ray_ports.json) nor in their ranges (Ray's workers, the kernel's ephemeral ports).
GATED_PROXY_PORT = 18000


class Autoscaling(StrictModel):
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(2, ge=1)
    target_ongoing_requests: float = Field(2.0, gt=0, description="per replica, before Serve adds one")

    @model_validator(mode="after")
    def _bounds(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})")
        return self


class ServeConfig(StrictModel):
    engine: Literal["auto", "transformers", "vllm"] = Field(
        "auto", description="language models: vllm on GPUs (ray-worker-llm image), transformers otherwise"
    )
    replicas: int | None = Field(None, ge=1, description="a fixed count (default 1); or autoscaling")
    autoscaling: Autoscaling | None = None
    cpus_per_replica: float = Field(1.0, gt=0)
    gpus_per_replica: int = Field(0, ge=0)
    tensor_parallel_size: int = Field(1, ge=1, description="vllm only: GPUs one model is split over")
    max_tokens_limit: int = Field(512, ge=1, description="the most tokens one request may ask to generate")
    max_ongoing_requests: int = Field(8, ge=1, description="per replica; more wait in the proxy's queue")
    port: int = Field(
        8000, ge=1024, le=65535, description="the endpoint's port: Serve's proxy on 127.0.0.1, or on ECS the gate's"
    )

    @model_validator(mode="after")
    def _consistent(self) -> ServeConfig:
        if self.replicas is not None and self.autoscaling is not None:
            raise ValueError("replicas and autoscaling: give one of them, not both")
        if self.engine == "vllm" and self.gpus_per_replica < self.tensor_parallel_size:
            raise ValueError(
                f"engine vllm needs gpus_per_replica >= tensor_parallel_size, got {self.gpus_per_replica} "
                f"and {self.tensor_parallel_size}"
            )
        if self.engine == "transformers" and self.tensor_parallel_size > 1:
            raise ValueError("tensor_parallel_size above 1 needs engine: vllm")
        return self

    def resolved_engine(self) -> str:
        if self.engine != "auto":
            return self.engine
        return "vllm" if self.gpus_per_replica > 0 else "transformers"

    def deployment_options(self) -> dict:
        """Ray Serve's options for the deployment that holds the model."""
        options: dict = {
            "ray_actor_options": {"num_cpus": self.cpus_per_replica, "num_gpus": self.gpus_per_replica},
            "max_ongoing_requests": self.max_ongoing_requests,
            # A replica that cannot load the run (a broken export) will not on a retry: fail the deploy early
            # with its error instead of retrying 20 times (Serve's default).
            "max_constructor_retry_count": CONSTRUCTOR_RETRIES,
        }
        if self.autoscaling is not None:
            options["autoscaling_config"] = self.autoscaling.model_dump()
        else:
            options["num_replicas"] = self.replicas or 1
        return options
