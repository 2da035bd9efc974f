# What the scripts read from .rayfleet/outputs.json (scripts/rayfleet/ecs/outputs.py); tests/infra/test_structure.py
# checks that every field they need is here.
output "region" {
  description = "Region of the deployment."
  value       = var.region
}

output "cluster_name" {
  description = "ECS cluster name."
  value       = module.cluster.cluster_name
}

output "private_subnet_ids" {
  description = "Subnets the trainer task runs in."
  value       = module.network.private_subnet_ids
}

output "task_security_group_id" {
  description = "Security group of every Ray task."
  value       = module.network.task_security_group_id
}

output "trainer_task_definition" {
  description = "Task definition the launch script runs."
  value       = module.ray.trainer_task_definition
}

output "trainer_container_name" {
  description = "Container of the trainer task that runs the job."
  value       = module.ray.container_names.trainer
}

output "trainer_log_group" {
  description = "Log group of the trainer (the job driver)."
  value       = module.ray.log_groups["trainer"]
}

output "trainer_log_stream_prefix" {
  description = "awslogs stream prefix of the trainer container."
  value       = "trainer"
}

output "head_service_name" {
  description = "ECS service of the Ray head."
  value       = module.ray.head_service_name
}

output "head_container_name" {
  description = "Container of the head task (make exec, make ray-status)."
  value       = module.ray.container_names.head
}

output "control_service_name" {
  description = "ECS service of the control task (the head's snapshot and autostop)."
  value       = module.ray.control_service_name
}

output "head_dns_name" {
  description = "Private DNS name of the Ray head."
  value       = module.ray.head_dns_name
}

output "results_bucket" {
  description = "Bucket for checkpoints, metrics and datasets."
  value       = module.storage.bucket_name
}

output "log_groups" {
  description = "Log group per container."
  value       = module.ray.log_groups
}

output "ecr_repository_urls" {
  description = "ECR repository per image (make push pushes here)."
  value       = module.registry.repository_urls
}

output "ray_token_secret_arn" {
  description = "Secrets Manager secret of the Ray auth token (make rotate-ray-token writes new versions)."
  value       = module.ray.ray_token_secret_arn
}

output "dashboard_name" {
  description = "CloudWatch dashboard of the GPUs."
  value       = module.observability.dashboard_name
}

output "task_sizes_mib" {
  description = "Memory, shared memory and object store per task (MiB)."
  value       = module.ray.sizes_mib
}

output "head_instance_type" {
  description = "Instance type of the Ray head (make start checks the vCPU quotas for it)."
  value       = var.head_instance_type
}

output "concurrent_runs" {
  description = "Recipe runs the head instance holds drivers for at once: make run refuses one more."
  value       = var.concurrent_runs
}

output "image_tag" {
  description = "Tag of the images the services run (make push marks those images deployed-<tag>, which the ECR lifecycle never expires)."
  value       = var.image_tag
}

output "serve_endpoint" {
  description = "Ray Serve's URL inside the VPC, reachable only from serve.allowed_*; empty with serving off (make serve)."
  value       = module.ray.serve_endpoint
}

output "serve_api_key_secret_arn" {
  description = "The secret holding the Serve API key; empty with serving off."
  value       = module.ray.serve_api_key_secret_arn
}

output "notifications_topic_arn" {
  description = "The SNS topic of the idle alarm and of runs' notifications (subscribe with notify_emails)."
  value       = module.observability.notifications_topic_arn
}

output "gcs_store" {
  description = "The head's GCS store, whose AUTH token `make deploy` sets and writes to secret_arn (null: no store)."
  value       = var.gcs_store.enabled ? { replication_group_id = module.gcs_store[0].replication_group_id, secret_arn = module.ray.gcs_store_secret_arn } : null
}

output "worker_groups" {
  description = "The worker groups by name, what the scripts act on: each one's ECS service and container, Auto Scaling group and capacity provider, instance types (the first preferred; a run's shape is checked against the smallest), min and max nodes, Spot policy (on-demand, spot-preferred, spot-only) and on-demand base, EFA, GPUs per node and autostop minutes."
  value = { for g, w in local.workers : g => {
    service_name      = module.ray.worker_service_names[g]
    container_name    = module.ray.container_names.worker
    autoscaling_group = module.cluster.autoscaling_group_names[w.node_group]
    capacity_provider = module.cluster.capacity_providers[w.node_group]
    instance_types    = w.instance_types
    min_nodes         = w.min
    max_nodes         = w.max
    spot              = w.spot
    on_demand_base    = w.on_demand_base
    efa               = w.efa
    gpus              = w.gpus
    idle_minutes      = w.idle_minutes
    models            = w.models
    models_from       = w.models_from
  } }
}
