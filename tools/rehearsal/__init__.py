"""A rehearsal of the ECS deployment on one machine: the task definitions Terraform renders run as podman
containers the way ECS would start them, against a moto server standing in for AWS, and the laptop verbs
(make train-ddp/run/launch, status, logs, stop) work against it through the same outputs file.

picture.py   the deployment picture in AWS API shapes, from Terraform's rendered state (the one place)
cloud.py     moto (moto_process.py: a process of its own), and the picture created in it (network, cluster...)
host.py      what changes to fit one host (sizes, CPUs, GPUs, ulimits), said in one line
agent.py     the ECS agent and service scheduler: moto's tasks as pods and containers, logs, health
store.py     the GCS store (gcs_store enabled): a TLS redis-server as ElastiCache at the rendered endpoint
rehearsal.py up (foreground; Ctrl-C or `down` stops everything) and down

What it adds that ECS does not have: AWS_ENDPOINT_URL (moto) and AWS_DISABLE_REQUEST_COMPRESSION in every
container, the task role's session keys as environment variables (ECS serves them from its credentials
endpoint, which botocore reaches only at ECS's own link-local address); with a GCS store, the store's endpoint
name in every pod's hosts file and the stand-in's CA in the head's CA bundle (AWS's CA is in the image's own).
Nothing of this host is mounted: a recipe's data reaches the jobs as on ECS, staged by `make run` to the
bucket (rayfleet/recipes/stage.py).

What moto cannot record, and the rehearsal writes into moto's backend instead (cloud.Moto): a task's
status (moto says RUNNING from RunTask on, not PENDING until the containers run), health and, once
stopped, exit code (moto reports 0 for every container); a service's runningCount
(moto sets it to desiredCount); an instance's registered CPU, memory and GPUs. Still not recorded: the
exit codes of a task's second container (moto keeps only the first container definition), service
events, and the deployments' own counts (a forced new deployment is followed: its tasks replace the old).

IAM is enforced as in the moto tier (tools/moto_stack/iam.py, one fixture): each container acts as its task
definition's task role, the secrets are fetched as its execution role, the verbs act as the operator
(infra/operator-policy.json); the rehearsal's own ECS and CloudWatch calls as the allow-all inspector.

What it cannot show: what moto's IAM does not judge (conditions, non-S3 resource ARNs, resource and key
policies: the `for_moto` transformation's list), the instance role (the awslogs driver's), VPC routing, NAT,
security groups and VPC endpoints (all tasks share one podman bridge network), GPUs and the NVIDIA runtime
(dropped without GPUs; untested with them), EFA and host networking (the fsdp shape runs on the bridge
network), capacity providers and Auto Scaling (instances are registered up front), ECS Exec, Cloud Map health
checks and TTLs (a podman network alias), image pulls from ECR (local images), and real instance sizes
(everything is scaled to share this host).
"""
