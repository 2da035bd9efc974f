"""The one moto stack: what `make deploy` creates, made in moto from Terraform's own rendering.

ecs.py    moto's ECS with the behaviours a rendered deployment depends on (registered resources, GPUs,
          placement constraints, placement failures), as a moto_server process or patched in-process
stack.py  the rendered deployment created in that moto, and the outputs file the verbs read
iam.py    the rendered roles, the operator and an inspector in that moto, IAM enforced (one transformation)
s3.py     moto_server with S3's DeleteObjects authorized per key, as AWS does

Used by the integration tests (tests/integration/conftest.py: EcsMotoServer + stack.create) and by the
podman rehearsal (tools/rehearsal/cloud.py: its in-process moto + stack.create without service tasks).
"""
