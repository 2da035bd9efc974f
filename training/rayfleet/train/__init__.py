"""rayfleet's training library: the jobs (ddp, fsdp) and what they share; the shared core is rayfleet.core.

Importing it changes nothing: entry points set up Ray token auth (rayfleet.core.ray_auth) before Ray is imported."""
