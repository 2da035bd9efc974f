"""The language-model endpoint on GPUs: Ray Serve LLM with vLLM, OpenAI's routes, the same API key check.

Runs only where vLLM is installed: the ray-worker-llm image (requirements/serve-llm.txt; vLLM pins its
own torch, so it is an image of its own). `serving_args` is the translation from ServeConfig and can be
read and tested anywhere; `build_vllm` hands it to Ray's public `build_openai_app`.
"""

from __future__ import annotations

INGRESS = "rayfleet.serve.vllm_ingress:KeyedOpenAiIngress"


def serving_args(spec) -> dict:
    """Ray Serve LLM's LLMServingArgs for a run's export (`spec`: rayfleet.serve.app.ServeArgs)."""
    cfg = spec.config
    source = spec.run_dir().display(spec.folder)
    # Replicas, autoscaling and limits as for the transformers engine; Ray Serve LLM sizes the actors itself.
    deployment = {k: v for k, v in cfg.deployment_options().items() if k != "ray_actor_options"}
    llm_config = {
        "model_loading_config": {
            "model_id": spec.run_name,
            # vLLM reads a local folder; an s3:// export is mirrored to the node first by Ray Serve LLM
            "model_source": {"bucket_uri": source} if source.startswith("s3://") else source,
        },
        "deployment_config": deployment,
        "engine_kwargs": {"tensor_parallel_size": cfg.tensor_parallel_size, "max_num_seqs": cfg.max_ongoing_requests},
    }
    return {
        "llm_configs": [llm_config],
        "ingress_cls_config": {
            "ingress_cls": INGRESS,
            "ingress_extra_kwargs": {"api_key_file": spec.api_key_file, "gated": spec.gated},
        },
    }


def build_vllm(spec):
    from ray.serve.llm import build_openai_app

    return build_openai_app(serving_args(spec))
