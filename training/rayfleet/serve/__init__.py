"""Serving what a run trained, on the rayfleet cluster (Ray Serve); this code runs in the cluster.

    config.py       ServeConfig: replicas, GPUs, engine, limits (strict YAML, like a recipe)
    served_run.py   what a run holds to serve: the FSDP job's Hugging Face export or the DDP job's checkpoint
    keys.py         the API key every request must carry, read inside the replica (never through Ray)
    http.py         the HTTP surface: OpenAI-style errors, the key check, request schemas
    llm.py          /v1/completions and /v1/chat/completions with transformers (CPU, or one GPU)
    classifier.py   /v1/classify for a DDP run: images in, class probabilities out, as the job evaluates
    app.py          the Serve application builder the verbs deploy (`rayfleet.serve.app:build`)
    vllm_app.py     the same OpenAI routes on Ray Serve LLM with vLLM (the ray-worker-llm image)

The laptop side (`make serve`, `serve-status`, `serve-down`) is rayfleet/ops/.
"""
