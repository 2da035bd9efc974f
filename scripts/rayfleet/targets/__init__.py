"""Where a run goes: the Target interface (base.py), the local cluster (local.py), the ECS deployment (ecs.py),
and the one place that chooses between them (run.py, also the `rayfleet run` entry point)."""
