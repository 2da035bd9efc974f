"""rayfleet: distributed PyTorch training on Ray, on a laptop first, then on AWS ECS GPU instances.

The folders say where code runs (docs/DESIGN.md, "Layers"); importing any of them changes nothing (entry
points set up Ray token auth themselves, before Ray is imported)."""
