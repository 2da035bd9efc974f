"""rayfleet's training library: the jobs (ddp, fsdp) and what they share; the shared core is training.core.

Importing it changes nothing: entry points set up Ray token auth (training.core.ray_auth) before Ray is imported."""
