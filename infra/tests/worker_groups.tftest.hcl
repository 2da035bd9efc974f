# The worker groups' model (infra/variables.tf worker_groups, mocked providers): each group is a node group of
# its own ("worker-<group>"; "worker" for a group named default, whose resources keep the names of the single
# worker group of earlier versions, infra/moved.tf), with its own service, task definition, Auto Scaling group
# and capacity provider; its min, max, Spot policy and autostop minutes reach the outputs the scripts read and
# the control task; and the inputs Terraform refuses, the old `workers` variable among them.
# default.tftest.hcl and fsdp.tftest.hcl read the default groups; spot.tftest.hcl Spot groups' Auto Scaling.

mock_provider "aws" {
  source = "./tests"
}

mock_provider "random" {}

variables {
  model_cache     = { pointer_key = "staged/models.json", host_dir = "/opt/rayfleet/cache" } # as infra/main.tf
  model_cache_dir = "/opt/rayfleet/cache"
  image_tag       = "0123456789ab"
  catalog         = jsondecode(file("../training/rayfleet/core/instance_types.json")).instance_types
  # the ray module's inputs other than the groups, as default.tftest.hcl gives them
  name                  = "rayfleet"
  region                = "us-east-1"
  vpc_id                = "vpc-0123456789abcdef0"
  cluster_arn           = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"
  subnet_ids            = ["subnet-0123456789abcdef0"]
  security_group_id     = "sg-0000000000000ray0"
  ray_ports             = jsondecode(file("catalog/ray_ports.json"))
  images                = { "ray-head" = "h:1", "ray-worker" = "w:1", "trainer" = "t:1", "gpu-metrics" = "g:1" }
  execution_role_arn    = "arn:aws:iam::123456789012:role/rayfleet-task-execution"
  task_role_arn         = "arn:aws:iam::123456789012:role/rayfleet-task"
  control_task_role_arn = "arn:aws:iam::123456789012:role/rayfleet-control-task"
  kms_key_arn           = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  results_bucket        = "rayfleet-results-0123456789"
}

# ---- a group named default: the single worker group of earlier versions, by its old names ------------------
run "a_group_named_default" {
  command = apply

  variables {
    worker_groups = { default = { instance_types = ["g5.xlarge"], min = 2, max = 2 } }
  }

  assert {
    condition = (
      module.cluster.capacity_providers == { head = "rayfleet-head", worker = "rayfleet-worker" } &&
      keys(module.cluster.autoscaling_group_names) == ["head", "worker"] &&
      module.ray.worker_service_names == { default = "rayfleet-ray-worker" } &&
      module.ray.service_names == ["rayfleet-ray-control", "rayfleet-ray-head", "rayfleet-ray-worker"]
    )
    error_message = "A group named default is node group worker, service rayfleet-ray-worker: ${jsonencode(module.cluster.capacity_providers)}"
  }

  assert {
    condition = jsonencode(output.worker_groups) == jsonencode({
      default = {
        service_name      = "rayfleet-ray-worker"
        container_name    = "ray-worker"
        autoscaling_group = module.cluster.autoscaling_group_names["worker"]
        capacity_provider = "rayfleet-worker"
        instance_types    = ["g5.xlarge"]
        min_nodes         = 2
        max_nodes         = 2
        spot              = "on-demand"
        on_demand_base    = 0
        efa               = false
        gpus              = 1
        idle_minutes      = 30
        models            = false
        models_from       = "image"
      }
    })
    error_message = "The default group's outputs: ${jsonencode(output.worker_groups)}"
  }

  assert {
    condition     = output.task_sizes_mib.workers == { default = { memory = 14489, shm = 5370, object_store = 4346 } }
    error_message = "2 x g5.xlarge workers are sized as before: ${jsonencode(output.task_sizes_mib.workers)}"
  }
}

# What the root gives the ray module for that group: the task definition's family and the service's name are the
# old ones, the service runs its min (2) from the start, on the worker capacity provider and instances.
run "a_group_named_default_in_the_ray_module" {
  command = apply

  module {
    source = "./modules/ray"
  }

  variables {
    capacity_providers = { head = "rayfleet-head", worker = "rayfleet-worker" }
    head_node          = { vcpus = 4, memory_mib = 16384, gpus = 0 }
    worker_groups = {
      default = { node_group = "worker", instance_type = "g5.xlarge", vcpus = 4, memory_mib = 16384, gpus = 1, min = 2, max = 2, efa = false, idle_minutes = 30 }
    }
  }

  assert {
    condition     = output.sizes_mib.workers == run.a_group_named_default.task_sizes_mib.workers && output.worker_service_names == { for g, w in run.a_group_named_default.worker_groups : g => w.service_name }
    error_message = "This run's inputs differ from what the root gives the ray module for a group named default."
  }

  assert {
    condition = (
      aws_ecs_task_definition.worker["default"].family == "rayfleet-ray-worker" &&
      aws_ecs_service.worker["default"].name == "rayfleet-ray-worker" && aws_ecs_service.worker["default"].desired_count == 2 &&
      [for c in aws_ecs_service.worker["default"].capacity_provider_strategy : c.capacity_provider] == ["rayfleet-worker"] &&
      [for p in aws_ecs_service.worker["default"].placement_constraints : p.expression if p.type == "memberOf"] == ["attribute:rayfleet.node-group == worker"]
    )
    error_message = "The default group's task definition and service keep the single group's names and placement."
  }

  assert {
    condition = {
      for e in jsondecode(aws_ecs_task_definition.worker["default"].container_definitions)[0].environment : e.name => e.value
      if contains(["RAYFLEET_WORKER_GROUP", "RAYFLEET_NUM_GPUS", "RAYFLEET_NUM_CPUS", "RAYFLEET_OBJECT_STORE_MIB"], e.name)
    } == { RAYFLEET_WORKER_GROUP = "default", RAYFLEET_NUM_GPUS = "1", RAYFLEET_NUM_CPUS = "4", RAYFLEET_OBJECT_STORE_MIB = "4346" }
    error_message = "The default group's workers carry the label default: ${aws_ecs_task_definition.worker["default"].container_definitions}"
  }

  assert {
    condition = jsondecode({
      for e in jsondecode(aws_ecs_task_definition.control.container_definitions)[0].environment : e.name => e.value
      }["RAYFLEET_WORKER_GROUPS"]) == {
      default = { service = "rayfleet-ray-worker", vcpus = 4, gpus = 1, memory_mib = 16384, min = 2, max = 2, idle_minutes = 30 }
    }
    error_message = "The control task knows the one group: ${aws_ecs_task_definition.control.container_definitions}"
  }

  assert {
    condition = alltrue([
      for e in jsondecode(aws_ecs_task_definition.control.container_definitions)[0].environment :
      !contains(["RAYFLEET_WORKER_SERVICE", "RAYFLEET_WORKER_NODE"], e.name)
    ])
    error_message = "The single group's variables are gone from the control task: RAYFLEET_WORKER_GROUPS replaces them."
  }
}

# ---- several groups: Spot policies, autostop minutes, EFA without a placement group -----------------------
run "three_groups" {
  command = apply

  variables {
    autostop = { idle_minutes = 45 }
    worker_groups = {
      ddp       = { instance_types = ["g5.xlarge"], min = 1, max = 4 }
      "ddp-l4"  = { instance_types = ["g6.xlarge", "g5.xlarge"], max = 8, spot = "spot-only", idle_minutes = 10 }
      "fsdp-pg" = { instance_types = ["g6.12xlarge"], max = 2, efa = true, placement_group = false, spot = "spot-preferred", on_demand_base = 1, idle_minutes = 0, models = true }
    }
  }

  assert {
    condition = (
      keys(module.cluster.capacity_providers) == ["head", "worker-ddp", "worker-ddp-l4", "worker-fsdp-pg"] &&
      module.ray.worker_service_names == { ddp = "rayfleet-ray-worker-ddp", "ddp-l4" = "rayfleet-ray-worker-ddp-l4", "fsdp-pg" = "rayfleet-ray-worker-fsdp-pg" } &&
      length(distinct(values(module.cluster.autoscaling_group_names))) == 4
    )
    error_message = "A node group, an Auto Scaling group and a service per group: ${jsonencode(module.cluster.capacity_providers)}"
  }

  assert {
    condition = (
      { for g, w in output.worker_groups : g => [w.min_nodes, w.max_nodes, w.spot, w.on_demand_base, w.idle_minutes, w.efa, w.gpus, w.models] } == {
        ddp       = [1, 4, "on-demand", 0, 45, false, 1, false]
        "ddp-l4"  = [0, 8, "spot-only", 0, 10, false, 1, false]
        "fsdp-pg" = [0, 2, "spot-preferred", 1, 0, true, 4, true]
      } &&
      output.worker_groups["ddp-l4"].instance_types == tolist(["g6.xlarge", "g5.xlarge"]) &&
      output.worker_groups["ddp-l4"].autoscaling_group == module.cluster.autoscaling_group_names["worker-ddp-l4"] &&
      output.worker_groups["ddp-l4"].capacity_provider == "rayfleet-worker-ddp-l4"
    )
    error_message = "Each group's min, max, Spot policy, on-demand base, autostop minutes (autostop's unless its own), EFA, GPUs and models: ${jsonencode(output.worker_groups)}"
  }

  assert {
    condition = (
      output.task_sizes_mib.workers.ddp == { memory = 14489, shm = 5370, object_store = 4346 } &&
      output.task_sizes_mib.workers["ddp-l4"] == output.task_sizes_mib.workers.ddp &&
      output.task_sizes_mib.workers["fsdp-pg"] == { memory = 176691, shm = 54031, object_store = 53007 }
    )
    error_message = "Each group's worker task is sized to its smallest type: ${jsonencode(output.task_sizes_mib.workers)}"
  }
}

# The control task's view of several groups (training/rayfleet/core/worker_groups.py ecs_groups_from), as the
# root gives the ray module the three groups above.
run "three_groups_in_the_ray_module" {
  command = apply

  module {
    source = "./modules/ray"
  }

  variables {
    capacity_providers = { head = "rayfleet-head", "worker-ddp" = "rayfleet-worker-ddp", "worker-ddp-l4" = "rayfleet-worker-ddp-l4", "worker-fsdp-pg" = "rayfleet-worker-fsdp-pg" }
    head_node          = { vcpus = 4, memory_mib = 16384, gpus = 0 }
    autostop           = { idle_minutes = 45 }
    worker_groups = {
      ddp      = { node_group = "worker-ddp", instance_type = "g5.xlarge", vcpus = 4, memory_mib = 16384, gpus = 1, min = 1, max = 4, efa = false, idle_minutes = 45 }
      "ddp-l4" = { node_group = "worker-ddp-l4", instance_type = "g6.xlarge", vcpus = 4, memory_mib = 16384, gpus = 1, min = 0, max = 8, efa = false, idle_minutes = 10 }
      "fsdp-pg" = {
        node_group = "worker-fsdp-pg", instance_type = "g6.12xlarge", vcpus = 48, memory_mib = 196608, gpus = 4, min = 0, max = 2,
        efa        = true, efa_devices = var.catalog["g6.12xlarge"].efa_devices, efa_rdma = var.catalog["g6.12xlarge"].efa_rdma, idle_minutes = 0,
        models     = true
      }
    }
  }

  assert {
    condition     = output.sizes_mib.workers == run.three_groups.task_sizes_mib.workers && output.worker_service_names == { for g, w in run.three_groups.worker_groups : g => w.service_name }
    error_message = "This run's inputs differ from what the root gives the ray module for the three groups."
  }

  assert {
    condition = jsondecode({
      for e in jsondecode(aws_ecs_task_definition.control.container_definitions)[0].environment : e.name => e.value
      }["RAYFLEET_WORKER_GROUPS"]) == {
      ddp       = { service = "rayfleet-ray-worker-ddp", vcpus = 4, gpus = 1, memory_mib = 16384, min = 1, max = 4, idle_minutes = 45 }
      "ddp-l4"  = { service = "rayfleet-ray-worker-ddp-l4", vcpus = 4, gpus = 1, memory_mib = 16384, min = 0, max = 8, idle_minutes = 10 }
      "fsdp-pg" = { service = "rayfleet-ray-worker-fsdp-pg", vcpus = 48, gpus = 4, memory_mib = 196608, min = 0, max = 2, idle_minutes = 0 }
    }
    error_message = "RAYFLEET_WORKER_GROUPS: every group's service, node shape, min, max and autostop minutes: ${aws_ecs_task_definition.control.container_definitions}"
  }

  assert {
    condition = (
      { for g, s in aws_ecs_service.worker : g => s.desired_count } == { ddp = 1, "ddp-l4" = 0, "fsdp-pg" = 0 } &&
      { for g, t in aws_ecs_task_definition.worker : g => t.network_mode } == { ddp = "awsvpc", "ddp-l4" = "awsvpc", "fsdp-pg" = "host" } &&
      { for g, t in aws_ecs_task_definition.worker : g => { for e in jsondecode(t.container_definitions)[0].environment : e.name => e.value }["RAYFLEET_WORKER_GROUP"] } == { ddp = "ddp", "ddp-l4" = "ddp-l4", "fsdp-pg" = "fsdp-pg" } &&
      { for g, t in aws_ecs_task_definition.worker : g => { for e in jsondecode(t.container_definitions)[1].environment : e.name => e.value }["RAYFLEET_INSTANCE_TYPE"] } == { ddp = "g5.xlarge", "ddp-l4" = "g6.xlarge", "fsdp-pg" = "g6.12xlarge" }
    )
    error_message = "Each group's service starts at its min; its workers carry its label, its network mode and its first type."
  }

  assert {
    condition     = { for g, t in aws_ecs_task_definition.worker : g => jsondecode(t.container_definitions)[0].image } == { ddp = "w:1", "ddp-l4" = "w:1", "fsdp-pg" = "w:1-models" }
    error_message = "Only the group with models runs the ray-worker image with the preloaded models (its tag's -models variant)."
  }
}

# ---- refused: each run sets one thing wrong, and expects that refusal only --------------------------------
run "a_group_without_an_instance_type" {
  command = plan
  variables {
    worker_groups = { ddp = { instance_types = [] } }
  }
  expect_failures = [var.worker_groups]
}

run "types_with_different_gpu_counts" {
  command = plan
  variables {
    worker_groups = { mixed = { instance_types = ["g5.xlarge", "g5.12xlarge"] } }
  }
  expect_failures = [var.worker_groups]
}

run "a_max_below_the_min" {
  command = plan
  variables {
    worker_groups = { ddp = { instance_types = ["g5.xlarge"], min = 3, max = 2 } }
  }
  expect_failures = [var.worker_groups]
}

run "a_min_that_is_not_a_whole_number" {
  command = plan
  variables {
    worker_groups = { ddp = { instance_types = ["g5.xlarge"], min = 0.5, max = 2 } }
  }
  expect_failures = [var.worker_groups]
}

run "a_spot_policy_that_is_none_of_the_three" {
  command = plan
  variables {
    worker_groups = { ddp = { instance_types = ["g5.xlarge"], spot = "true" } }
  }
  expect_failures = [var.worker_groups]
}

run "a_group_name_that_is_no_ray_label" {
  command = plan
  variables {
    worker_groups = { DDP_1 = { instance_types = ["g5.xlarge"] } }
  }
  expect_failures = [var.worker_groups]
}

run "negative_idle_minutes" {
  command = plan
  variables {
    worker_groups = { ddp = { instance_types = ["g5.xlarge"], idle_minutes = -5 } }
  }
  expect_failures = [var.worker_groups]
}

# The old single group is refused, whatever it set (the message prints the equivalent worker_groups entry:
# tests/infra/test_worker_group_migration.py reads it and plans with it).
run "the_old_workers_variable" {
  command = plan
  variables {
    workers = { instance_type = "g5.xlarge", count = 2 }
  }
  expect_failures = [var.workers]
}

run "the_old_workers_variable_empty" {
  command = plan
  variables {
    workers = {}
  }
  expect_failures = [var.workers]
}

run "the_old_workers_variable_on_spot_with_efa" {
  command = plan
  variables {
    workers = { instance_type = "g5.12xlarge", count = 2, efa = true, placement_group = true, spot = true, on_demand_base = 1, root_volume_gb = 300 }
  }
  expect_failures = [var.workers]
}
