"""rayfleet training jobs: the DDP job (training.ddp) and what the jobs share."""

from scripts.ray_auth import use_token_auth

# Before any training module imports ray: Ray reads its auth mode once, at import time.
use_token_auth()
