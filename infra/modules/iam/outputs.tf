output "execution_role_arn" {
  description = "Task execution role: image pull, logs, the Ray token secret."
  value       = aws_iam_role.execution.arn
}

output "task_role_arn" {
  description = "Task role: bucket prefixes, PutMetricData in one namespace, ECS Exec."
  value       = aws_iam_role.task.arn
}

output "head_task_role_arn" {
  description = "The head's task role: the task role's rights, and scaling its own two services (autostop)."
  value       = aws_iam_role.head_task.arn
}

output "instance_profile_arn" {
  description = "Instance profile of the container instances."
  value       = aws_iam_instance_profile.instance.arn
}

output "kms_key_arn" {
  description = "The deployment's KMS key."
  value       = aws_kms_key.this.arn
}
