locals {
  # The one source of metric names and dimensions, shared with the sidecar (monitoring/metrics.json).
  spec = jsondecode(file("${path.module}/../../../monitoring/metrics.json"))
}

# Rendered from the same spec by `python -m monitoring.dashboard --write`; SEARCH expressions scoped to
# this cluster, so instances and GPUs that come later appear without a new apply.
resource "aws_cloudwatch_dashboard" "gpu" {
  dashboard_name = "${var.cluster_name}-gpu"
  dashboard_body = templatefile("${path.module}/dashboard.json.tftpl", {
    cluster_name = var.cluster_name
    region       = var.region
  })
}

# The sidecar only runs inside worker tasks, so data exists exactly while workers run: missing data means
# no workers (nothing to pay for) and must not alarm.
resource "aws_cloudwatch_metric_alarm" "gpus_idle" {
  alarm_name          = "${var.cluster_name}-gpus-idle"
  alarm_description   = "No GPU of ${var.cluster_name} above ${var.idle_threshold_percent}% for ${var.idle_minutes} minutes while workers run: scale the workers down (make stop) or start a job."
  namespace           = local.spec.namespace
  metric_name         = local.spec.idle_alarm.metric
  dimensions          = { ClusterName = var.cluster_name }
  statistic           = local.spec.idle_alarm.statistic
  period              = 300
  evaluation_periods  = var.idle_minutes / 5
  threshold           = var.idle_threshold_percent
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = concat([aws_sns_topic.notifications.arn], var.alarm_actions)
  tags                = merge(var.tags, { Component = "observability" })
}

# Where rayfleet tells people things: the idle alarm above, and runs (started, succeeded, failed with the
# output's tail, resumed, stalled: training/rayfleet/recipes/notify.py, through the trainer's RAYFLEET_NOTIFY_TOPIC_ARN).
# Encrypted with the deployment's key, which lets CloudWatch alarms use it (infra/modules/iam/kms.tf).
resource "aws_sns_topic" "notifications" {
  name              = "${var.cluster_name}-notifications"
  kms_master_key_id = var.kms_key_arn
  tags              = merge(var.tags, { Component = "observability" })
}

# Each address gets a confirmation mail from AWS first; nothing arrives until it is confirmed.
resource "aws_sns_topic_subscription" "email" {
  for_each  = toset(var.notify_emails)
  topic_arn = aws_sns_topic.notifications.arn
  protocol  = "email"
  endpoint  = each.value
}

# Who else may publish: the EventBridge rules given (the head-stopped rule, infra/modules/ray), each by its
# ARN, and CloudWatch alarms of this account. The account's own principals publish by their IAM policies
# (the task role may publish to this topic alone: infra/modules/iam).
resource "aws_sns_topic_policy" "notifications" {
  arn = aws_sns_topic.notifications.arn
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat(
      [{
        Sid       = "AlarmsOfThisAccount"
        Effect    = "Allow"
        Principal = { Service = "cloudwatch.amazonaws.com" }
        Action    = "sns:Publish"
        Resource  = aws_sns_topic.notifications.arn
        Condition = { StringEquals = { "aws:SourceAccount" = data.aws_caller_identity.current.account_id } }
      }],
      length(var.event_rule_arns) == 0 ? [] : [{
        Sid       = "TheseEventRules"
        Effect    = "Allow"
        Principal = { Service = "events.amazonaws.com" }
        Action    = "sns:Publish"
        Resource  = aws_sns_topic.notifications.arn
        Condition = { ArnEquals = { "aws:SourceArn" = var.event_rule_arns } }
      }],
    )
  })
}

data "aws_caller_identity" "current" {}
