output "execution_role_arn" {
  description = "Task execution role: image pull, logs, the Ray token secret."
  value       = aws_iam_role.execution.arn
}

output "task_role_arn" {
  description = "Task role: bucket prefixes, PutMetricData in one namespace, ECS Exec."
  value       = aws_iam_role.task.arn
}

output "control_task_role_arn" {
  description = "The control task's role: the head's snapshot under cluster/ and scaling the deployment's services (autostop); no job runs with it."
  value       = aws_iam_role.control.arn
}

output "instance_profile_arn" {
  description = "Instance profile of the container instances."
  value       = aws_iam_instance_profile.instance.arn
}

output "kms_key_arn" {
  description = "The deployment's KMS key."
  value       = aws_kms_key.this.arn
}
