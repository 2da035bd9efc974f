# Notifications (mocked providers): one SNS topic per deployment, encrypted with the deployment's key, that
# the idle-GPU alarm notifies first and whose ARN the trainer (where the jobs' drivers run) gets; e-mail
# subscriptions from notify_emails; the task role may publish to that topic alone. The trainer also gets the run
# queue's budget (queue_budget; one that is not a budget: refusals.tftest.hcl).

mock_provider "aws" {
  source = "./tests"
}

mock_provider "random" {}

variables {
  model_cache     = { pointer_key = "staged/models.json", host_dir = "/opt/rayfleet/cache" } # as infra/main.tf
  model_cache_dir = "/opt/rayfleet/cache"
  image_tag       = "0123456789ab"
  catalog         = jsondecode(file("../training/rayfleet/core/instance_types.json")).instance_types
  ray_ports       = jsondecode(file("catalog/ray_ports.json"))
}

run "topic" {
  command = apply

  module {
    source = "./modules/observability"
  }

  variables {
    cluster_name    = "rayfleet"
    region          = "us-east-1"
    kms_key_arn     = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
    notify_emails   = ["ml-team@example.com", "oncall@example.com"]
    alarm_actions   = ["arn:aws:sns:us-east-1:123456789012:pager"]
    event_rule_arns = ["arn:aws:events:us-east-1:123456789012:rule/rayfleet-head-stopped"]
  }

  override_resource {
    target = aws_sns_topic.notifications
    values = { arn = "arn:aws:sns:us-east-1:123456789012:rayfleet-notifications" }
  }

  override_data {
    target = data.aws_caller_identity.current
    values = { account_id = "123456789012" }
  }

  assert {
    condition = [for s in jsondecode(aws_sns_topic_policy.notifications.policy).Statement : [s.Sid, s.Principal, s.Action, s.Resource, s.Condition]] == [
      ["AlarmsOfThisAccount", { Service = "cloudwatch.amazonaws.com" }, "sns:Publish", "arn:aws:sns:us-east-1:123456789012:rayfleet-notifications", { StringEquals = { "aws:SourceAccount" = "123456789012" } }],
      ["TheseEventRules", { Service = "events.amazonaws.com" }, "sns:Publish", "arn:aws:sns:us-east-1:123456789012:rayfleet-notifications", { ArnEquals = { "aws:SourceArn" = ["arn:aws:events:us-east-1:123456789012:rule/rayfleet-head-stopped"] } }],
    ]
    error_message = "Services publish to the topic only as this account's alarms and the rules given, by ARN: ${aws_sns_topic_policy.notifications.policy}"
  }

  assert {
    condition     = aws_sns_topic.notifications.name == "rayfleet-notifications" && aws_sns_topic.notifications.kms_master_key_id == var.kms_key_arn
    error_message = "The topic is named after the deployment (the IAM module builds its ARN from the name) and uses the deployment's key."
  }

  assert {
    condition = (
      aws_cloudwatch_metric_alarm.gpus_idle.alarm_actions == toset(["arn:aws:sns:us-east-1:123456789012:rayfleet-notifications", "arn:aws:sns:us-east-1:123456789012:pager"])
    )
    error_message = "The idle alarm notifies the topic by default, and any extra actions."
  }

  assert {
    condition = (
      { for k, s in aws_sns_topic_subscription.email : k => [s.protocol, s.endpoint, s.topic_arn] } == {
        "ml-team@example.com" = ["email", "ml-team@example.com", "arn:aws:sns:us-east-1:123456789012:rayfleet-notifications"]
        "oncall@example.com"  = ["email", "oncall@example.com", "arn:aws:sns:us-east-1:123456789012:rayfleet-notifications"]
      }
    )
    error_message = "One e-mail subscription per address, on the topic."
  }

  assert {
    condition     = output.notifications_topic_arn == "arn:aws:sns:us-east-1:123456789012:rayfleet-notifications"
    error_message = "The topic's ARN is an output (root output and the trainer's environment)."
  }
}

run "no_addresses_still_a_topic" {
  command = plan

  module {
    source = "./modules/observability"
  }

  variables {
    cluster_name = "rayfleet"
    region       = "us-east-1"
    kms_key_arn  = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  }

  assert {
    condition     = length(aws_sns_topic_subscription.email) == 0 && aws_sns_topic.notifications.name == "rayfleet-notifications"
    error_message = "Without addresses the topic exists (runs and the alarm publish; subscribe later) and has no subscription."
  }
}

run "not_an_address" {
  command = plan

  module {
    source = "./modules/observability"
  }

  variables {
    cluster_name  = "rayfleet"
    region        = "us-east-1"
    kms_key_arn   = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
    notify_emails = ["ml-team"]
  }

  expect_failures = [var.notify_emails]
}

run "root_wiring" {
  command = apply

  assert {
    condition     = output.notifications_topic_arn == module.observability.notifications_topic_arn
    error_message = "The root outputs the topic."
  }

  assert {
    condition     = module.ray.head_stopped_rule_arn != null
    error_message = "The root gives the ray module the topic, so the head-stopped rule exists (and may publish)."
  }
}

run "the_trainer_knows_the_topic" {
  command = apply

  module {
    source = "./modules/ray"
  }

  variables {
    name                  = "rayfleet"
    region                = "us-east-1"
    vpc_id                = "vpc-0123456789abcdef0"
    cluster_arn           = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"
    capacity_providers    = { head = "rayfleet-head", worker = "rayfleet-worker" }
    subnet_ids            = ["subnet-0123456789abcdef0"]
    security_group_id     = "sg-0000000000000ray0"
    images                = { "ray-head" = "h:1", "ray-worker" = "w:1", "trainer" = "t:1", "gpu-metrics" = "g:1" }
    head_node             = { vcpus = 4, memory_mib = 16384, gpus = 0 }
    worker_groups         = { default = { node_group = "worker", instance_type = "g5.xlarge", vcpus = 4, memory_mib = 16384, gpus = 1, min = 2, max = 2, efa = false, efa_devices = 0, efa_rdma = false } }
    execution_role_arn    = "arn:aws:iam::123456789012:role/rayfleet-task-execution"
    task_role_arn         = "arn:aws:iam::123456789012:role/rayfleet-task"
    control_task_role_arn = "arn:aws:iam::123456789012:role/rayfleet-control-task"
    kms_key_arn           = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
    results_bucket        = "rayfleet-results-0123456789"
    notify_topic_arn      = "arn:aws:sns:us-east-1:123456789012:rayfleet-notifications"
    queue_budget          = "500/month"
    queue_max_priority    = 4
    notify_head_stopped   = true
  }

  # issue 54 R2: the priority ceiling is the operator's, in both readers of the queue (a job cannot change it).
  assert {
    condition = alltrue([
      for d in [aws_ecs_task_definition.trainer, aws_ecs_task_definition.control] : {
        for e in jsondecode(d.container_definitions)[0].environment : e.name => e.value
      }["RAYFLEET_MAX_PRIORITY"] == "4"
    ])
    error_message = "The control task and the trainer's admissions clamp priorities to the operator's queue_max_priority."
  }

  assert {
    condition = {
      for e in jsondecode(aws_ecs_task_definition.trainer.container_definitions)[0].environment : e.name => e.value
    }["RAYFLEET_NOTIFY_TOPIC_ARN"] == var.notify_topic_arn
    error_message = "The trainer, where the jobs' drivers run, gets the topic's ARN."
  }

  assert {
    condition = alltrue([
      for d in concat([aws_ecs_task_definition.head], values(aws_ecs_task_definition.worker)) :
      !strcontains(d.container_definitions, "RAYFLEET_NOTIFY_TOPIC_ARN")
    ])
    error_message = "Only the trainer notifies."
  }

  assert {
    condition = {
      for e in jsondecode(aws_ecs_task_definition.trainer.container_definitions)[0].environment : e.name => e.value
    }["RAYFLEET_QUEUE_BUDGET"] == "500/month"
    error_message = "The trainer, whose drivers admit the queued runs, gets the queue's budget."
  }

  # issue 31: the head's replacement is told, from ECS's own event for the head service's tasks only.
  assert {
    condition = jsondecode(aws_cloudwatch_event_rule.head_stopped[0].event_pattern) == {
      source        = ["aws.ecs"]
      "detail-type" = ["ECS Task State Change"]
      detail = {
        clusterArn = ["arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"]
        group      = ["service:rayfleet-ray-head"]
        lastStatus = ["STOPPED"]
      }
    }
    error_message = "The rule matches the head service's stopped tasks in this cluster, nothing else."
  }

  assert {
    condition = (
      aws_cloudwatch_event_target.head_stopped[0].arn == var.notify_topic_arn &&
      aws_cloudwatch_event_target.head_stopped[0].rule == "rayfleet-head-stopped" &&
      strcontains(aws_cloudwatch_event_target.head_stopped[0].input_transformer[0].input_template, "<reason>") &&
      aws_cloudwatch_event_target.head_stopped[0].input_transformer[0].input_paths.reason == "$.detail.stoppedReason"
    )
    error_message = "The rule tells the topic, in one line with the task's stop reason."
  }
}
