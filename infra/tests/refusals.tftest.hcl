# What Terraform must refuse: impossible task sizes (the ray module's preconditions, infra/modules/ray/
# task_definitions.tf with the arithmetic of sizing.tf), invalid inputs (variable validations of the root
# and the modules), and EFA on a type without it (the root's check). Each run expects exactly the named
# failure; a run that plans without it, or fails on something else, fails.
# Preconditions of a child module's resources can only be expected in a run of that module, so the size
# refusals run ./modules/ray with the catalog's facts of the types the root would give it.

mock_provider "aws" {
  source = "./tests"
}

mock_provider "random" {}

variables {
  model_cache     = { pointer_key = "staged/models.json", host_dir = "/opt/rayfleet/cache" } # as infra/main.tf
  model_cache_dir = "/opt/rayfleet/cache"
  bucket_arn      = "arn:aws:s3:::rayfleet-results-0123456789" # the network module's S3 endpoint policy
  image_tag       = "0123456789ab"
  catalog         = jsondecode(file("../training/rayfleet/core/instance_types.json")).instance_types
  # the ray module's inputs other than the node shapes
  name                  = "rayfleet"
  region                = "us-east-1"
  vpc_id                = "vpc-0123456789abcdef0"
  cluster_arn           = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"
  capacity_providers    = { head = "rayfleet-head", worker = "rayfleet-worker", "worker-cpu" = "rayfleet-worker-cpu", "worker-big" = "rayfleet-worker-big" }
  subnet_ids            = ["subnet-0123456789abcdef0"]
  security_group_id     = "sg-0000000000000ray0"
  ray_ports             = jsondecode(file("catalog/ray_ports.json"))
  images                = { "ray-head" = "h:1", "ray-worker" = "w:1", "trainer" = "t:1", "gpu-metrics" = "g:1" }
  execution_role_arn    = "arn:aws:iam::123456789012:role/rayfleet-task-execution"
  task_role_arn         = "arn:aws:iam::123456789012:role/rayfleet-task"
  control_task_role_arn = "arn:aws:iam::123456789012:role/rayfleet-control-task"
  kms_key_arn           = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  results_bucket        = "rayfleet-results-0123456789" # the ray module's ray-control writes here
  # the ray module's worker_groups entry for a group named default of 2 x g5.xlarge
  g5_xlarge_group = { node_group = "worker", instance_type = "g5.xlarge", vcpus = 4, memory_mib = 16384, gpus = 1, min = 2, max = 2, efa = false }
}

# ---- task sizes ---------------------------------------------------------------------------------------------
run "a_head_of_8_gib_leaves_the_trainer_too_little" {
  command = plan
  module {
    source = "./modules/ray"
  }
  variables {
    head_node     = { vcpus = var.catalog["m5.large"].vcpus, memory_mib = var.catalog["m5.large"].memory_mib, gpus = 0 }
    worker_groups = { default = var.g5_xlarge_group }
  }
  expect_failures = [aws_ecs_task_definition.trainer]
}

run "a_queue_budget_that_is_not_one" {
  command = plan
  module {
    source = "./modules/ray"
  }
  variables {
    head_node     = { vcpus = var.catalog["m5.xlarge"].vcpus, memory_mib = var.catalog["m5.xlarge"].memory_mib, gpus = 0 }
    worker_groups = { default = var.g5_xlarge_group }
    queue_budget  = "500/week"
  }
  expect_failures = [var.queue_budget]
}

run "two_concurrent_runs_on_the_default_head" {
  command = plan
  module {
    source = "./modules/ray"
  }
  variables {
    head_node       = { vcpus = 4, memory_mib = var.catalog["m5.xlarge"].memory_mib, gpus = 0 }
    worker_groups   = { default = var.g5_xlarge_group }
    concurrent_runs = 2
  }
  expect_failures = [aws_ecs_task_definition.trainer]
}

run "two_concurrent_runs_on_a_head_twice_the_size" {
  command = plan
  module {
    source = "./modules/ray"
  }
  variables {
    head_node       = { vcpus = 8, memory_mib = var.catalog["m5.2xlarge"].memory_mib, gpus = 0 }
    worker_groups   = { default = var.g5_xlarge_group }
    concurrent_runs = 2
  }
  assert {
    condition     = output.sizes_mib.trainer == { memory = 5898, shm = 2498, object_store = 1474 }
    error_message = "Each of two drivers on m5.2xlarge gets what the one driver of the default m5.xlarge head has: ${jsonencode(output.sizes_mib.trainer)}"
  }
}

run "a_concurrent_runs_that_is_not_a_whole_number" {
  command = plan
  variables {
    concurrent_runs = 1.5
  }
  expect_failures = [var.concurrent_runs]
}

run "a_worker_type_without_a_gpu" {
  command = plan
  module {
    source = "./modules/ray"
  }
  variables {
    head_node = { vcpus = 4, memory_mib = var.catalog["m5.xlarge"].memory_mib, gpus = 0 }
    worker_groups = {
      cpu = { node_group = "worker-cpu", instance_type = "m5.2xlarge", vcpus = 8, memory_mib = var.catalog["m5.2xlarge"].memory_mib, gpus = var.catalog["m5.2xlarge"].gpus, min = 0, max = 2, efa = false }
    }
  }
  expect_failures = [aws_ecs_task_definition.worker]
}

# A group without a GPU is refused beside a group that is fine: every group's task definition is checked.
run "a_second_worker_group_without_a_gpu" {
  command = plan
  module {
    source = "./modules/ray"
  }
  variables {
    head_node = { vcpus = 4, memory_mib = var.catalog["m5.xlarge"].memory_mib, gpus = 0 }
    worker_groups = {
      default = var.g5_xlarge_group
      cpu     = { node_group = "worker-cpu", instance_type = "m5.2xlarge", vcpus = 8, memory_mib = var.catalog["m5.2xlarge"].memory_mib, gpus = var.catalog["m5.2xlarge"].gpus, min = 0, max = 2, efa = false }
    }
  }
  expect_failures = [aws_ecs_task_definition.worker["cpu"]]
}

run "a_gpu_worker_whose_store_and_processes_do_not_fit" {
  command = plan
  module {
    source = "./modules/ray"
  }
  variables {
    head_node             = { vcpus = 4, memory_mib = var.catalog["m5.xlarge"].memory_mib, gpus = 0 }
    worker_groups         = { tiny = { node_group = "worker-tiny", instance_type = "tiny.gpu", vcpus = 2, memory_mib = 4096, gpus = 1, min = 0, max = 1, efa = false } }
    object_store_fraction = 0.5
  }
  expect_failures = [aws_ecs_task_definition.worker]
}

run "the_smallest_head_that_fits_and_the_largest_worker" {
  command = plan
  module {
    source = "./modules/ray"
  }
  variables {
    head_node             = { vcpus = 4, memory_mib = var.catalog["m5.xlarge"].memory_mib, gpus = 0 }
    worker_groups         = { big = { node_group = "worker-big", instance_type = "p5.48xlarge", vcpus = 192, memory_mib = var.catalog["p5.48xlarge"].memory_mib, gpus = 8, min = 0, max = 2, efa = true } }
    object_store_fraction = 0.5
  }
  assert {
    condition     = output.sizes_mib.workers.big.shm + 2048 <= output.sizes_mib.workers.big.memory && output.sizes_mib.trainer.shm + 2048 <= output.sizes_mib.trainer.memory
    error_message = "m5.xlarge head and p5.48xlarge workers fit: ${jsonencode(output.sizes_mib)}"
  }
}

run "an_object_store_fraction_out_of_range" {
  command = plan
  module {
    source = "./modules/ray"
  }
  variables {
    head_node             = { vcpus = 4, memory_mib = 16384, gpus = 0 }
    worker_groups         = { default = var.g5_xlarge_group }
    object_store_fraction = 0.6
  }
  expect_failures = [var.object_store_fraction]
}

# ---- the root's inputs ----------------------------------------------------------------------------------------
run "no_worker_group" {
  command = plan
  variables {
    worker_groups = {}
  }
  expect_failures = [var.worker_groups]
}

run "a_worker_group_of_no_workers" {
  command = plan
  variables {
    worker_groups = { ddp = { instance_types = ["g5.xlarge"], max = 0 } }
  }
  expect_failures = [var.worker_groups]
}

run "a_name_that_cannot_name_resources" {
  command = plan
  variables {
    name = "Ray_Fleet"
  }
  expect_failures = [var.name]
}

run "the_latest_tag" {
  command = plan
  variables {
    image_tag = "latest"
  }
  expect_failures = [var.image_tag]
}

run "efa_on_a_type_without_it" {
  command = plan
  variables {
    worker_groups = {
      ddp  = { instance_types = ["g5.xlarge"], efa = true }
      fsdp = { instance_types = ["g5.12xlarge"], efa = true }
    }
  }
  expect_failures = [check.efa_supported]
}

# ---- the modules' inputs --------------------------------------------------------------------------------------
run "a_root_volume_smaller_than_the_gpu_ami" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    node_groups = {
      worker = { instance_type = "g5.xlarge", count = 1, gpus = 1, efa = false, spot = false, placement_group = false, root_volume_gb = 20 }
    }
    subnet_ids           = ["subnet-0123456789abcdef0"]
    security_group_ids   = ["sg-00000000instances"]
    instance_profile_arn = "arn:aws:iam::123456789012:instance-profile/rayfleet-instance"
  }
  expect_failures = [var.node_groups]
}

run "five_zones" {
  command = plan
  module {
    source = "./modules/network"
  }
  variables {
    az_count = 5
  }
  expect_failures = [var.az_count]
}

run "an_idle_alarm_not_in_5_minute_steps" {
  command = plan
  module {
    source = "./modules/observability"
  }
  variables {
    cluster_name = "rayfleet"
    idle_minutes = 7
  }
  expect_failures = [var.idle_minutes]
}

run "serving_without_anyone_allowed_to_call_it" {
  command = plan
  variables {
    serve = { enabled = true }
  }
  expect_failures = [var.serve]
}

run "serving_open_to_the_world" {
  command = plan
  variables {
    serve = { enabled = true, allowed_cidrs = ["0.0.0.0/0"] }
  }
  expect_failures = [var.serve]
}

run "serving_open_to_half_the_internet" {
  command = plan
  variables {
    serve = { enabled = true, allowed_cidrs = ["0.0.0.0/1"] }
  }
  expect_failures = [var.serve]
}

run "serving_inside_rays_worker_port_range" {
  command = plan
  variables {
    serve = { enabled = true, port = 10500, allowed_cidrs = ["10.0.0.0/8"] }
  }
  expect_failures = [var.serve]
}

run "serving_on_the_port_behind_the_gate" {
  command = plan
  variables {
    serve = { enabled = true, port = 18000, allowed_cidrs = ["10.0.0.0/8"] }
  }
  expect_failures = [var.serve]
}

run "serving_on_a_ray_port" {
  command = plan
  variables {
    serve = { enabled = true, port = 6379, allowed_cidrs = ["10.0.0.0/8"] }
  }
  expect_failures = [var.serve]
}
