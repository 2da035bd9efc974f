# When the head task stops (a crash, its instance lost, `make deploy` of a new image, `make rotate-ray-token`),
# ECS starts a replacement and the workers rejoin it, but a run that was running on it ends (a recipe with
# `retries` resumes from its checkpoint): say so on the notifications topic. ECS emits a Task State Change for
# every task; this rule takes the head service's stops only. Publishing is allowed to this rule alone
# (infra/modules/observability: the topic's policy; infra/modules/iam: the key lets EventBridge encrypt).
resource "aws_cloudwatch_event_rule" "head_stopped" {
  count       = var.notify_head_stopped ? 1 : 0
  name        = "${var.name}-head-stopped"
  description = "The Ray head task of ${var.name} stopped: ECS replaces it; runs on it end unless their recipe retries."
  event_pattern = jsonencode({
    source        = ["aws.ecs"]
    "detail-type" = ["ECS Task State Change"]
    detail = {
      clusterArn = [var.cluster_arn]
      group      = ["service:${local.service_names.head}"]
      lastStatus = ["STOPPED"]
    }
  })
  tags = local.tags
}

resource "aws_cloudwatch_event_target" "head_stopped" {
  count = var.notify_head_stopped ? 1 : 0
  rule  = aws_cloudwatch_event_rule.head_stopped[0].name
  arn   = var.notify_topic_arn

  input_transformer {
    input_paths = { task = "$.detail.taskArn", reason = "$.detail.stoppedReason", at = "$.detail.stoppedAt" }
    # A JSON string: SNS delivers it as the message, one line.
    input_template = "\"rayfleet ${var.name}: the Ray head task <task> stopped at <at> (<reason>). ECS starts a new head and the workers rejoin it; a run that was running ended unless its recipe retries (make runs).\""
  }
}
