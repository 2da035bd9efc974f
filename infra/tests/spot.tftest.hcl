# Worker groups on Spot that hold their capacity (issue 17, mocked providers): several instance types with the
# same GPU count, the tasks sized to the smallest of them, capacity rebalancing, an on-demand base, the Spot
# notice poller running on Spot groups only; an on-demand group may list several types too; and the inputs
# Terraform refuses.

mock_provider "aws" {
  source = "./tests"
}

mock_provider "random" {}

variables {
  model_cache     = { pointer_key = "staged/models.json", host_dir = "/opt/rayfleet/cache" } # as infra/main.tf
  model_cache_dir = "/opt/rayfleet/cache"
  image_tag       = "0123456789ab"
  catalog         = jsondecode(file("../training/rayfleet/core/instance_types.json")).instance_types
  worker_groups = {
    spot = {
      instance_types = ["g5.2xlarge", "g5.xlarge", "g6.xlarge"]
      max            = 3
      spot           = "spot-preferred"
      on_demand_base = 1
    }
  }
}

run "root" {
  command = apply

  assert {
    condition = (
      output.worker_groups.spot.instance_types == tolist(["g5.2xlarge", "g5.xlarge", "g6.xlarge"]) &&
      output.worker_groups.spot.spot == "spot-preferred" && output.worker_groups.spot.max_nodes == 3 &&
      output.worker_groups.spot.on_demand_base == 1
    )
    error_message = "The group may run on every listed type, on Spot: ${jsonencode(output.worker_groups.spot)}."
  }

  # g5.2xlarge has 32 GiB, g5.xlarge and g6.xlarge 16: a worker task must fit the smallest (90% of 16 GiB less
  # the sidecar's 256 MiB), or a Spot instance of a smaller type could never place it.
  assert {
    condition     = output.task_sizes_mib.workers.spot.memory == floor(16384 * 0.9) - 256
    error_message = "Worker tasks are sized to the smallest type: ${jsonencode(output.task_sizes_mib.workers.spot)}."
  }

  assert {
    condition     = keys(module.cluster.capacity_providers) == ["head", "worker-spot"]
    error_message = "One worker node group, the group's: ${jsonencode(module.cluster.capacity_providers)}"
  }
}

# The node groups the root gives the cluster module for three groups (infra/main.tf local.node_groups): Spot
# preferred with an on-demand base, Spot only, and on demand with several types (spot = the group's spot is
# not "on-demand").
run "cluster" {
  command = apply

  module {
    source = "./modules/cluster"
  }

  variables {
    name = "rayfleet"
    node_groups = {
      head = { instance_type = "m5.xlarge", count = 1, gpus = 0, efa = false, spot = false, placement_group = false, root_volume_gb = 100 }
      "worker-spot" = {
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
      "worker-cheap" = {
        instance_type   = "g6.xlarge"
        count           = 4
        gpus            = 1
        efa             = false
        spot            = true
        placement_group = false
        root_volume_gb  = 200
        instance_types  = ["g6.xlarge", "g5.xlarge"]
        on_demand_base  = 0
      }
      "worker-steady" = {
        instance_type   = "g5.xlarge"
        count           = 2
        gpus            = 1
        efa             = false
        spot            = false
        placement_group = false
        root_volume_gb  = 200
        instance_types  = ["g5.xlarge", "g6.xlarge"]
        on_demand_base  = 0
      }
    }
    subnet_ids           = ["subnet-0000000000000az1", "subnet-0000000000000az2"]
    security_group_ids   = ["sg-00000000instances"]
    instance_profile_arn = "arn:aws:iam::123456789012:instance-profile/rayfleet-instance"
    kms_key_arn          = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  }

  # One override per listed type, in the group's order (the first preferred), whatever its Spot policy.
  assert {
    condition = (
      [for o in aws_autoscaling_group.this["worker-spot"].mixed_instances_policy[0].launch_template[0].override : o.instance_type] == ["g5.2xlarge", "g5.xlarge", "g6.xlarge"] &&
      [for o in aws_autoscaling_group.this["worker-cheap"].mixed_instances_policy[0].launch_template[0].override : o.instance_type] == ["g6.xlarge", "g5.xlarge"] &&
      [for o in aws_autoscaling_group.this["worker-steady"].mixed_instances_policy[0].launch_template[0].override : o.instance_type] == ["g5.xlarge", "g6.xlarge"] &&
      length(aws_autoscaling_group.this["head"].mixed_instances_policy[0].launch_template[0].override) == 0
    )
    error_message = "A group launches any of its types; the head keeps its one type."
  }

  assert {
    condition = (
      aws_autoscaling_group.this["worker-spot"].capacity_rebalance == true &&
      aws_autoscaling_group.this["worker-cheap"].capacity_rebalance == true &&
      aws_autoscaling_group.this["worker-steady"].capacity_rebalance == false &&
      aws_autoscaling_group.this["head"].capacity_rebalance == false
    )
    error_message = "Capacity rebalancing on the Spot groups only."
  }

  assert {
    condition = (
      aws_autoscaling_group.this["worker-spot"].mixed_instances_policy[0].instances_distribution[0].on_demand_base_capacity == 1 &&
      aws_autoscaling_group.this["worker-spot"].mixed_instances_policy[0].instances_distribution[0].on_demand_percentage_above_base_capacity == 0 &&
      aws_autoscaling_group.this["worker-spot"].mixed_instances_policy[0].instances_distribution[0].spot_allocation_strategy == "price-capacity-optimized" &&
      aws_autoscaling_group.this["worker-cheap"].mixed_instances_policy[0].instances_distribution[0].on_demand_base_capacity == 0 &&
      aws_autoscaling_group.this["worker-cheap"].mixed_instances_policy[0].instances_distribution[0].on_demand_percentage_above_base_capacity == 0
    )
    error_message = "One worker of the spot group on demand whatever Spot does, the rest Spot from the least interrupted pools."
  }

  assert {
    condition = alltrue([
      for k in ["head", "worker-steady"] :
      aws_autoscaling_group.this[k].mixed_instances_policy[0].instances_distribution[0].on_demand_percentage_above_base_capacity == 100 &&
      aws_autoscaling_group.this[k].mixed_instances_policy[0].instances_distribution[0].on_demand_base_capacity == 0
    ])
    error_message = "The head and an on-demand group, even with several types, launch on demand only."
  }

  assert {
    condition = (
      strcontains(base64decode(aws_launch_template.this["worker-spot"].user_data), "if [ \"true\" = \"true\" ]; then\n  systemctl enable --now rayfleet-spot-notice.service") &&
      strcontains(base64decode(aws_launch_template.this["worker-spot"].user_data), "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true\n") &&
      strcontains(base64decode(aws_launch_template.this["worker-steady"].user_data), "ECS_ENABLE_SPOT_INSTANCE_DRAINING=false\n") &&
      strcontains(base64decode(aws_launch_template.this["worker-steady"].user_data), "if [ \"false\" = \"true\" ]; then") &&
      strcontains(base64decode(aws_launch_template.this["head"].user_data), "if [ \"false\" = \"true\" ]; then")
    )
    error_message = "The Spot groups poll for interruption notices and let ECS drain; the head and on-demand groups do neither."
  }
}

run "a_type_with_other_gpus_is_refused" {
  command = plan
  variables {
    worker_groups = { spot = { instance_types = ["g5.xlarge", "g5.12xlarge"], spot = "spot-only" } }
  }
  expect_failures = [var.worker_groups]
}

run "a_type_not_in_the_catalog_is_refused" {
  command = plan
  variables {
    worker_groups = { spot = { instance_types = ["g5.xlarge", "g9.mega"], spot = "spot-only" } }
  }
  expect_failures = [var.worker_groups]
}

run "an_on_demand_base_without_spot_is_refused" {
  command = plan
  variables {
    worker_groups = { steady = { instance_types = ["g5.xlarge", "g6.xlarge"], spot = "on-demand", on_demand_base = 1 } }
  }
  expect_failures = [var.worker_groups]
}

run "an_on_demand_base_above_the_max_is_refused" {
  command = plan
  variables {
    worker_groups = { spot = { instance_types = ["g5.xlarge"], max = 2, spot = "spot-preferred", on_demand_base = 3 } }
  }
  expect_failures = [var.worker_groups]
}

run "several_types_with_efa_are_refused" {
  command = plan
  variables {
    worker_groups = { fsdp = { instance_types = ["g5.12xlarge", "g6.12xlarge"], efa = true } }
  }
  expect_failures = [var.worker_groups]
}
