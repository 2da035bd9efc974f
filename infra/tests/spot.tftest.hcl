# Spot workers that hold their capacity (issue 17, mocked providers): several instance types with the same
# GPU count, the tasks sized to the smallest of them, capacity rebalancing, an on-demand base, the Spot notice
# poller running on the Spot group only; and the inputs Terraform refuses.

mock_provider "aws" {
  source = "./tests"
}

mock_provider "random" {}

variables {
  image_tag = "0123456789ab"
  catalog   = jsondecode(file("../training/rayfleet/core/instance_types.json")).instance_types
  workers = {
    instance_type       = "g5.2xlarge"
    count               = 3
    spot                = true
    spot_instance_types = ["g5.xlarge", "g6.xlarge"]
    on_demand_base      = 1
  }
}

run "root" {
  command = apply

  assert {
    condition     = output.worker_instance_types == tolist(["g5.2xlarge", "g5.xlarge", "g6.xlarge"]) && output.worker_lifecycle == "spot"
    error_message = "The workers may run on every listed type, on Spot: ${jsonencode(output.worker_instance_types)}."
  }

  # g5.2xlarge has 32 GiB, g5.xlarge and g6.xlarge 16: a worker task must fit the smallest (90% of 16 GiB less
  # the sidecar's 256 MiB), or a Spot instance of a smaller type could never place it.
  assert {
    condition     = output.task_sizes_mib["worker"].memory == floor(16384 * 0.9) - 256
    error_message = "Worker tasks are sized to the smallest type: ${jsonencode(output.task_sizes_mib["worker"])}."
  }
}

run "cluster" {
  command = apply

  module {
    source = "./modules/cluster"
  }

  variables {
    name = "rayfleet"
    node_groups = {
      head = { instance_type = "m5.xlarge", count = 1, gpus = 0, efa = false, spot = false, placement_group = false, root_volume_gb = 100 }
      worker = {
        instance_type   = "g5.2xlarge"
        count           = 3
        gpus            = 1
        efa             = false
        spot            = true
        placement_group = false
        root_volume_gb  = 200
        instance_types  = ["g5.2xlarge", "g5.xlarge", "g6.xlarge"]
        on_demand_base  = 1
      }
    }
    subnet_ids           = ["subnet-0000000000000az1", "subnet-0000000000000az2"]
    security_group_ids   = ["sg-00000000instances"]
    instance_profile_arn = "arn:aws:iam::123456789012:instance-profile/rayfleet-instance"
    kms_key_arn          = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  }

  assert {
    condition = (
      [for o in aws_autoscaling_group.this["worker"].mixed_instances_policy[0].launch_template[0].override : o.instance_type] == ["g5.2xlarge", "g5.xlarge", "g6.xlarge"] &&
      length(aws_autoscaling_group.this["head"].mixed_instances_policy[0].launch_template[0].override) == 0
    )
    error_message = "The Spot group launches any of its types; the head keeps its one type."
  }

  assert {
    condition = (
      aws_autoscaling_group.this["worker"].capacity_rebalance == true &&
      aws_autoscaling_group.this["head"].capacity_rebalance == false
    )
    error_message = "Capacity rebalancing on the Spot group only."
  }

  assert {
    condition = (
      aws_autoscaling_group.this["worker"].mixed_instances_policy[0].instances_distribution[0].on_demand_base_capacity == 1 &&
      aws_autoscaling_group.this["worker"].mixed_instances_policy[0].instances_distribution[0].on_demand_percentage_above_base_capacity == 0 &&
      aws_autoscaling_group.this["worker"].mixed_instances_policy[0].instances_distribution[0].spot_allocation_strategy == "price-capacity-optimized" &&
      aws_autoscaling_group.this["head"].mixed_instances_policy[0].instances_distribution[0].on_demand_percentage_above_base_capacity == 100
    )
    error_message = "One worker on-demand whatever Spot does, the rest Spot from the least interrupted pools; the head on-demand."
  }

  assert {
    condition = (
      strcontains(base64decode(aws_launch_template.this["worker"].user_data), "if [ \"true\" = \"true\" ]; then\n  systemctl enable --now rayfleet-spot-notice.service") &&
      strcontains(base64decode(aws_launch_template.this["worker"].user_data), "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true\n") &&
      strcontains(base64decode(aws_launch_template.this["head"].user_data), "if [ \"false\" = \"true\" ]; then")
    )
    error_message = "The Spot group polls for interruption notices and lets ECS drain; the head does neither."
  }
}

run "a_spot_type_with_other_gpus_is_refused" {
  command = plan
  variables {
    workers = { instance_type = "g5.xlarge", spot = true, spot_instance_types = ["g5.12xlarge"] }
  }
  expect_failures = [var.workers]
}

run "a_spot_type_not_in_the_catalog_is_refused" {
  command = plan
  variables {
    workers = { instance_type = "g5.xlarge", spot = true, spot_instance_types = ["g9.mega"] }
  }
  expect_failures = [var.workers]
}

run "spot_types_without_spot_are_refused" {
  command = plan
  variables {
    workers = { instance_type = "g5.xlarge", spot = false, spot_instance_types = ["g6.xlarge"] }
  }
  expect_failures = [var.workers]
}

run "an_on_demand_base_above_the_count_is_refused" {
  command = plan
  variables {
    workers = { instance_type = "g5.xlarge", count = 2, spot = true, on_demand_base = 3 }
  }
  expect_failures = [var.workers]
}
