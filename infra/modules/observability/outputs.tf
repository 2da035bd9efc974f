output "dashboard_name" {
  description = "Name of the GPU dashboard."
  value       = aws_cloudwatch_dashboard.gpu.dashboard_name
}

output "idle_alarm_arn" {
  description = "ARN of the idle-GPU alarm."
  value       = aws_cloudwatch_metric_alarm.gpus_idle.arn
}

output "metric_namespace" {
  description = "CloudWatch namespace the sidecar publishes to."
  value       = local.spec.namespace
}

output "notifications_topic_arn" {
  description = "ARN of the SNS topic the idle alarm and runs notify."
  value       = aws_sns_topic.notifications.arn
}
