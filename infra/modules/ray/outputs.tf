output "head_service_name" {
  description = "ECS service of the Ray head."
  value       = aws_ecs_service.head.name
}

output "control_service_name" {
  description = "ECS service of the control task (the head's snapshot and autostop)."
  value       = aws_ecs_service.control.name
}

output "service_names" {
  description = "The services' names (head, control and each worker group's), known before they exist: the control role's scope."
  value       = concat(values(local.service_names), values(local.worker_service_names))
}

output "worker_service_names" {
  description = "ECS service of each worker group's Ray workers."
  value       = { for g, s in aws_ecs_service.worker : g => s.name }
}

output "trainer_task_definition" {
  description = "Task definition (family:revision) the launch script runs for each job."
  value       = "${aws_ecs_task_definition.trainer.family}:${aws_ecs_task_definition.trainer.revision}"
}

output "head_dns_name" {
  description = "Private DNS name of the head (Cloud Map)."
  value       = local.head_dns
}

output "log_groups" {
  description = "Log group per container: ray-head, ray-worker, trainer, gpu-metrics."
  value       = { for c, g in aws_cloudwatch_log_group.this : c => g.name }
}

output "ray_token_secret_arn" {
  description = "Secrets Manager secret holding the Ray auth token (read only by the execution role)."
  value       = aws_secretsmanager_secret.ray_token.arn
}

output "container_names" {
  description = "Container name per task: head, worker, trainer."
  value = {
    head    = local.head_container.name
    worker  = "ray-worker" # every worker group's
    trainer = local.trainer_container.name
  }
}

output "sizes_mib" {
  description = "Memory, shared memory and object store per task, in MiB."
  value       = local.sizes
}

output "serve_api_key_secret_arn" {
  description = "The Serve API key's secret, or empty with serving off."
  value       = one(aws_secretsmanager_secret.serve_api_key[*].arn) == null ? "" : one(aws_secretsmanager_secret.serve_api_key[*].arn)
}

output "serve_endpoint" {
  description = "Ray Serve's URL inside the VPC (the head's private DNS name and the Serve port), or empty."
  value       = var.serve == null ? "" : "${var.serve.tls_secret_arn == null ? "http" : "https"}://${local.head_dns}:${var.serve.port}"
}

output "head_stopped_rule_arn" {
  description = "The EventBridge rule that tells the notifications topic when the head task stops (null without a topic)."
  value       = one(aws_cloudwatch_event_rule.head_stopped[*].arn)
}

output "gcs_store_secret_arn" {
  description = "The GCS store's AUTH token (make deploy writes it); null without a store."
  value       = var.gcs_store == null ? null : aws_secretsmanager_secret.gcs_store_token[0].arn
}
