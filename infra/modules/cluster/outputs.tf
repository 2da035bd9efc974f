output "cluster_name" {
  description = "Name of the ECS cluster."
  value       = aws_ecs_cluster.this.name
}

output "cluster_arn" {
  description = "ARN of the ECS cluster."
  value       = aws_ecs_cluster.this.arn
}

output "capacity_providers" {
  description = "Capacity provider name per node group."
  value       = { for k, cp in aws_ecs_capacity_provider.this : k => cp.name }
}

output "autoscaling_group_names" {
  description = "Auto Scaling group name per node group."
  value       = { for k, asg in aws_autoscaling_group.this : k => asg.name }
}

output "exec_log_group" {
  description = "Log group of ECS Exec sessions."
  value       = aws_cloudwatch_log_group.exec.name
}
