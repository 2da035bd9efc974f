"""The shared core of rayfleet/ and rayfleet/train/: strict YAML configs and one-line errors, Ray token auth, the
run directory (local or s3://), the AWS adapter, the instance catalog. Imports nothing else of rayfleet."""
