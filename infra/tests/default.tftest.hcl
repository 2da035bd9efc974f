# infra/'s defaults (an m5.2xlarge head holding two runs' drivers, and two worker groups at zero: ddp, up to
# 2 x g5.xlarge, and fsdp, up to 2 x g5.12xlarge with EFA), planned and applied with mocked providers: Terraform evaluates every expression,
# jsonencode and precondition of the root and its modules, and these assertions read what it rendered. Run:
# `terraform test` in a directory initialised with the stand-in providers (tests/infra/test_terraform_test.py
# does both). This file reads the ddp group and what every group shares; fsdp.tftest.hcl the fsdp group's EFA
# shape; worker_groups.tftest.hcl the groups' model (names, Spot, refusals).
#
# Test assertions can read the root module's resources and outputs, not a child module's resources, so
# the task definitions are read in runs of ./modules/ray itself, given the inputs the root gives it for
# the default groups (the catalog's facts); `output.sizes_mib == run.root.task_sizes_mib` and the services'
# and capacity providers' names tie the module runs to the root's.

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
  images = {
    "ray-head"    = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rayfleet/ray-head:0123456789ab"
    "ray-worker"  = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rayfleet/ray-worker:0123456789ab"
    "trainer"     = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rayfleet/trainer:0123456789ab"
    "gpu-metrics" = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rayfleet/gpu-metrics:0123456789ab"
  }
  execution_role_arn    = "arn:aws:iam::123456789012:role/rayfleet-task-execution"
  task_role_arn         = "arn:aws:iam::123456789012:role/rayfleet-task"
  control_task_role_arn = "arn:aws:iam::123456789012:role/rayfleet-control-task"
  kms_key_arn           = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  results_bucket        = "rayfleet-results-0123456789" # the ray module's ray-control writes here
  token_secret_arn      = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/ray-auth-token-20250601-AbCdEf"
}

run "root" {
  command = apply

  assert {
    condition = output.task_sizes_mib == {
      head    = { memory = 17438, shm = 5383, object_store = 4359 }
      trainer = { memory = 5898, shm = 2498, object_store = 1474 }
      workers = {
        ddp  = { memory = 14489, shm = 5370, object_store = 4346 }
        fsdp = { memory = 176691, shm = 54031, object_store = 53007 }
      }
    }
    error_message = "Task sizes of the default shape changed: ${jsonencode(output.task_sizes_mib)}"
  }

  assert {
    condition     = output.head_instance_type == "m5.2xlarge" && output.concurrent_runs == 2
    error_message = "The default head holds two runs' drivers, one per default worker group."
  }

  assert {
    condition = output.log_groups == {
      "ray-head"    = "/rayfleet/rayfleet/ray-head"
      "ray-control" = "/rayfleet/rayfleet/ray-control"
      "ray-worker"  = "/rayfleet/rayfleet/ray-worker"
      "trainer"     = "/rayfleet/rayfleet/trainer"
      "gpu-metrics" = "/rayfleet/rayfleet/gpu-metrics"
    }
    error_message = "One log group per container, named /rayfleet/<name>/<container> (every worker group's workers share ray-worker)."
  }

  assert {
    condition = (
      [output.head_container_name, output.trainer_container_name] == ["ray-head", "trainer"] &&
      [for g in ["ddp", "fsdp"] : output.worker_groups[g].container_name] == ["ray-worker", "ray-worker"]
    )
    error_message = "The container names the scripts use (scripts/rayfleet/ecs/outputs.py) changed."
  }

  assert {
    condition     = output.trainer_log_stream_prefix == "trainer" && output.head_dns_name == "head.rayfleet.rayfleet.internal"
    error_message = "The trainer's stream prefix or the head's private DNS name changed."
  }

  assert {
    condition = (
      output.cluster_name == "rayfleet" && output.head_service_name == "rayfleet-ray-head" && output.control_service_name == "rayfleet-ray-control" &&
      { for g, w in output.worker_groups : g => w.service_name } == { ddp = "rayfleet-ray-worker-ddp", fsdp = "rayfleet-ray-worker-fsdp" }
    )
    error_message = "Cluster and service names follow var.name, a worker group's service its group: ${jsonencode(output.worker_groups)}"
  }

  # What the scripts act on per group (scripts/rayfleet/ecs/outputs.py WorkerGroup): both groups start at zero,
  # on demand, and stop after autostop's idle minutes; only fsdp has EFA, and the preloaded models.
  assert {
    condition = jsonencode(output.worker_groups) == jsonencode({
      ddp = {
        service_name      = "rayfleet-ray-worker-ddp"
        container_name    = "ray-worker"
        autoscaling_group = module.cluster.autoscaling_group_names["worker-ddp"]
        capacity_provider = "rayfleet-worker-ddp"
        instance_types    = ["g5.xlarge"]
        min_nodes         = 0
        max_nodes         = 2
        spot              = "on-demand"
        on_demand_base    = 0
        efa               = false
        gpus              = 1
        idle_minutes      = 30
        models            = false
        models_from       = "image"
      }
      fsdp = {
        service_name      = "rayfleet-ray-worker-fsdp"
        container_name    = "ray-worker"
        autoscaling_group = module.cluster.autoscaling_group_names["worker-fsdp"]
        capacity_provider = "rayfleet-worker-fsdp"
        instance_types    = ["g5.12xlarge"]
        min_nodes         = 0
        max_nodes         = 2
        spot              = "on-demand"
        on_demand_base    = 0
        efa               = true
        gpus              = 4
        idle_minutes      = 30
        models            = true
        models_from       = "image"
      }
    })
    error_message = "The default worker groups: ${jsonencode(output.worker_groups)}"
  }

  # Two Auto Scaling groups and capacity providers besides the head's, one per group, named by its node group.
  assert {
    condition = (
      module.cluster.capacity_providers == { head = "rayfleet-head", "worker-ddp" = "rayfleet-worker-ddp", "worker-fsdp" = "rayfleet-worker-fsdp" } &&
      keys(module.cluster.autoscaling_group_names) == ["head", "worker-ddp", "worker-fsdp"] &&
      length(distinct(values(module.cluster.autoscaling_group_names))) == 3 &&
      module.ray.worker_service_names == { ddp = "rayfleet-ray-worker-ddp", fsdp = "rayfleet-ray-worker-fsdp" } &&
      module.ray.service_names == ["rayfleet-ray-control", "rayfleet-ray-head", "rayfleet-ray-worker-ddp", "rayfleet-ray-worker-fsdp"]
    )
    error_message = "Node groups head, worker-ddp, worker-fsdp: ${jsonencode(module.cluster.capacity_providers)}; services ${jsonencode(module.ray.service_names)}"
  }

  assert {
    condition     = toset(keys(output.ecr_repository_urls)) == toset(["gpu-metrics", "ray-head", "ray-worker", "trainer"])
    error_message = "The registry holds exactly the images images/ builds: ${jsonencode(keys(output.ecr_repository_urls))}"
  }

  assert {
    condition     = length(output.private_subnet_ids) == 1 && output.region == "us-east-1"
    error_message = "One zone by default (az_count = 1), in us-east-1."
  }

  assert {
    condition     = output.ray_token_secret_arn == var.token_secret_arn
    error_message = "The token's secret ARN is an output (make rotate-ray-token writes to it)."
  }

  assert {
    condition     = output.trainer_task_definition == "rayfleet-trainer:1"
    error_message = "The launch script runs family:revision of the trainer: ${output.trainer_task_definition}"
  }
}

run "ray" {
  command = apply

  module {
    source = "./modules/ray"
  }

  variables {
    name               = "rayfleet"
    region             = "us-east-1"
    vpc_id             = "vpc-0123456789abcdef0"
    cluster_arn        = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"
    capacity_providers = { head = "rayfleet-head", "worker-ddp" = "rayfleet-worker-ddp", "worker-fsdp" = "rayfleet-worker-fsdp" }
    subnet_ids         = ["subnet-0123456789abcdef0"]
    security_group_id  = "sg-0000000000000ray0"
    head_node          = { vcpus = var.catalog["m5.2xlarge"].vcpus, memory_mib = var.catalog["m5.2xlarge"].memory_mib, gpus = var.catalog["m5.2xlarge"].gpus }
    concurrent_runs    = 2
    # what the root gives the module for its default worker_groups (infra/main.tf local.workers)
    worker_groups = {
      ddp = {
        node_group    = "worker-ddp"
        instance_type = "g5.xlarge"
        vcpus         = var.catalog["g5.xlarge"].vcpus
        memory_mib    = var.catalog["g5.xlarge"].memory_mib
        gpus          = var.catalog["g5.xlarge"].gpus
        min           = 0
        max           = 2
        efa           = false
        idle_minutes  = 30
      }
      fsdp = {
        node_group    = "worker-fsdp"
        instance_type = "g5.12xlarge"
        vcpus         = var.catalog["g5.12xlarge"].vcpus
        memory_mib    = var.catalog["g5.12xlarge"].memory_mib
        gpus          = var.catalog["g5.12xlarge"].gpus
        min           = 0
        max           = 2
        efa           = true
        efa_devices   = var.catalog["g5.12xlarge"].efa_devices
        efa_rdma      = var.catalog["g5.12xlarge"].efa_rdma
        idle_minutes  = 30
        models        = true
      }
    }
  }

  override_resource {
    target = aws_secretsmanager_secret.ray_token
    values = {
      arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/ray-auth-token-20250601-AbCdEf"
      id  = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/ray-auth-token-20250601-AbCdEf"
    }
  }

  assert {
    condition = (
      output.sizes_mib == run.root.task_sizes_mib &&
      output.worker_service_names == { for g, w in run.root.worker_groups : g => w.service_name } &&
      alltrue([for g, w in run.root.worker_groups : var.capacity_providers["worker-${g}"] == w.capacity_provider])
    )
    error_message = "This run's inputs differ from what the root gives the ray module for the default groups."
  }

  assert {
    condition     = length(aws_cloudwatch_event_rule.head_stopped) == 0 && length(aws_cloudwatch_event_target.head_stopped) == 0
    error_message = "The head-stopped rule is off unless asked (the root asks, with its topic: notifications.tftest.hcl)."
  }

  # ---- the head ---------------------------------------------------------------------------------------
  assert {
    condition     = [for c in jsondecode(aws_ecs_task_definition.head.container_definitions) : c.name] == ["ray-head"]
    error_message = "The head task runs the head only: whatever may write cluster/ or scale the services runs in the control task."
  }

  assert {
    condition = { for k, v in jsondecode(aws_ecs_task_definition.control.container_definitions)[0] : k => v if !contains(["readonlyRootFilesystem", "privileged", "dockerSecurityOptions", "user", "linuxParameters", "mountPoints"], k) } == {
      name       = "ray-control"
      image      = var.images["ray-head"]
      essential  = true
      entryPoint = ["python", "-m", "rayfleet.node.control.head_snapshot"]
      command    = ["--bucket", var.results_bucket, "--interval", "30"]
      memory     = 256
      environment = [
        { name = "RAYFLEET_RAY_PORTS", value = jsonencode(var.ray_ports) },
        { name = "RAYFLEET_HEAD_HOST", value = "head.rayfleet.rayfleet.internal" },
        { name = "AWS_REGION", value = "us-east-1" },
        { name = "RAYFLEET_CLUSTER_NAME", value = "rayfleet" },
        { name = "RAYFLEET_HEAD_SERVICE", value = "rayfleet-ray-head" },
        { name = "RAYFLEET_CONTROL_SERVICE", value = "rayfleet-ray-control" },
        { name = "RAYFLEET_AUTOSTOP_IDLE_MIN", value = "30" },
        { name = "RAYFLEET_AUTOSTOP_HEAD", value = "false" },
        { name = "RAYFLEET_MAX_PRIORITY", value = "9" },
        {
          name = "RAYFLEET_WORKER_GROUPS"
          value = jsonencode({
            ddp  = { service = "rayfleet-ray-worker-ddp", vcpus = 4, gpus = 1, memory_mib = 16384, min = 0, max = 2, idle_minutes = 30 }
            fsdp = { service = "rayfleet-ray-worker-fsdp", vcpus = 48, gpus = 4, memory_mib = 196608, min = 0, max = 2, idle_minutes = 30 }
          })
        },
      ]
      secrets = [{ name = "RAY_AUTH_TOKEN", valueFrom = var.token_secret_arn }]
      logConfiguration = {
        logDriver = "awslogs"
        options   = { awslogs-group = "/rayfleet/rayfleet/ray-control", awslogs-region = "us-east-1", awslogs-stream-prefix = "ray-control" }
      }
      stopTimeout = 10
    }
    error_message = "ray-control: the head image running rayfleet.node.control.head_snapshot into the results bucket, with the token and the head's name: ${jsonencode(jsondecode(aws_ecs_task_definition.control.container_definitions)[0])}"
  }

  assert {
    condition = (
      aws_ecs_task_definition.control.task_role_arn == var.control_task_role_arn &&
      aws_ecs_service.control.desired_count == 1 && aws_ecs_service.control.name == "rayfleet-ray-control"
    )
    error_message = "The control task alone runs with the control role (cluster/, autostop), one task of it."
  }

  assert {
    condition = {
      for k, v in jsondecode(aws_ecs_task_definition.head.container_definitions)[0] : k => v
      if contains(["name", "image", "essential", "command", "memory", "stopTimeout"], k)
      } == {
      name        = "ray-head"
      image       = var.images["ray-head"]
      essential   = true
      command     = ["head"]
      memory      = 17438
      stopTimeout = 120
    }
    error_message = "Head container: ${aws_ecs_task_definition.head.container_definitions}"
  }

  assert {
    condition = {
      for e in jsondecode(aws_ecs_task_definition.head.container_definitions)[0].environment : e.name => e.value
      } == {
      RAY_AUTH_MODE             = "token"
      RAYFLEET_HEAD_HOST        = "head.rayfleet.rayfleet.internal"
      RAYFLEET_RAY_PORTS        = jsonencode(var.ray_ports)
      RAYFLEET_OBJECT_STORE_MIB = "4359"
    }
    error_message = "Head environment: ${jsonencode(jsondecode(aws_ecs_task_definition.head.container_definitions)[0].environment)}"
  }

  assert {
    condition     = jsondecode(aws_ecs_task_definition.head.container_definitions)[0].secrets == [{ name = "RAY_AUTH_TOKEN", valueFrom = var.token_secret_arn }]
    error_message = "The head reads RAY_AUTH_TOKEN from the token's secret, as an ECS secret."
  }

  assert {
    condition = jsondecode(aws_ecs_task_definition.head.container_definitions)[0].linuxParameters == {
      sharedMemorySize = 5383, initProcessEnabled = true, capabilities = { drop = ["ALL"] }
    }
    error_message = "Head shared memory is its object store + 1 GiB, with an init process."
  }

  assert {
    condition     = jsondecode(aws_ecs_task_definition.head.container_definitions)[0].ulimits == [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }]
    error_message = "Ray needs 65536 open files."
  }

  assert {
    condition = jsondecode(aws_ecs_task_definition.head.container_definitions)[0].healthCheck == {
      command = ["CMD", "rayfleet-node", "health"], interval = 15, timeout = 5, retries = 4, startPeriod = 60
    }
    error_message = "The head's health check runs rayfleet-node health."
  }

  assert {
    condition = jsondecode(aws_ecs_task_definition.head.container_definitions)[0].logConfiguration == {
      logDriver = "awslogs"
      options = {
        awslogs-group         = "/rayfleet/rayfleet/ray-head"
        awslogs-region        = "us-east-1"
        awslogs-stream-prefix = "ray-head"
      }
    }
    error_message = "The head logs to its own group with awslogs."
  }

  assert {
    condition     = !can(jsondecode(aws_ecs_task_definition.head.container_definitions)[0].resourceRequirements)
    error_message = "The head schedules, it does not train: no GPU reservation."
  }

  assert {
    condition = (
      aws_ecs_task_definition.head.network_mode == "awsvpc" && aws_ecs_task_definition.head.requires_compatibilities == toset(["EC2"]) &&
      aws_ecs_task_definition.head.execution_role_arn == var.execution_role_arn && aws_ecs_task_definition.head.task_role_arn == var.task_role_arn &&
      alltrue([for w in aws_ecs_task_definition.worker : w.task_role_arn == var.task_role_arn && w.execution_role_arn == var.execution_role_arn]) &&
      aws_ecs_task_definition.trainer.task_role_arn == var.task_role_arn
    )
    error_message = "The head task: awsvpc on EC2, the execution role pulls and reads the token; head, workers and trainers share the plain task role (a job can run in any of them)."
  }

  # ---- the workers: one task definition per group, the ddp group's here (fsdp.tftest.hcl reads fsdp's) ------
  assert {
    condition = (
      { for g, w in aws_ecs_task_definition.worker : g => w.family } == { ddp = "rayfleet-ray-worker-ddp", fsdp = "rayfleet-ray-worker-fsdp" } &&
      alltrue([for w in aws_ecs_task_definition.worker : [for c in jsondecode(w.container_definitions) : c.name] == ["ray-worker", "gpu-metrics"]])
    )
    error_message = "A task definition per worker group, its family named by its node group."
  }

  assert {
    condition     = [for c in jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions) : c.name] == ["ray-worker", "gpu-metrics"]
    error_message = "A worker task is the Ray worker and the GPU-metrics sidecar."
  }

  assert {
    condition = {
      for k, v in jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0] : k => v
      if contains(["image", "essential", "command", "memory", "resourceRequirements", "stopTimeout"], k)
      } == {
      image                = var.images["ray-worker"]
      essential            = true
      command              = ["worker"]
      memory               = 14489
      resourceRequirements = [{ type = "GPU", value = "1" }]
      stopTimeout          = 120
    }
    error_message = "Worker container: ${jsonencode(jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0])}"
  }

  assert {
    condition     = jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[0].image == "${var.images["ray-worker"]}-models"
    error_message = "The fsdp group's workers run the ray-worker image with the preloaded models; ddp's the plain one (above)."
  }

  assert {
    condition = {
      for e in jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].environment : e.name => e.value
      } == {
      RAY_AUTH_MODE             = "token"
      RAYFLEET_HEAD_HOST        = "head.rayfleet.rayfleet.internal"
      RAYFLEET_RAY_PORTS        = jsonencode(var.ray_ports)
      RAYFLEET_OBJECT_STORE_MIB = "4346"
      RAYFLEET_NUM_CPUS         = "4"
      RAYFLEET_WORKER_GROUP     = "ddp"
      RAYFLEET_NUM_GPUS         = "1"
      RAYFLEET_CURRENT_RUN_DIR  = "/run/rayfleet"
      RAYFLEET_HEALTH_DIR       = "/run/rayfleet-health"
      RAYFLEET_IDENTITY_FILE    = "/etc/rayfleet/identity.json"
    }
    error_message = "Worker environment: ${jsonencode(jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].environment)}"
  }

  assert {
    condition = (
      jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].secrets == [{ name = "RAY_AUTH_TOKEN", valueFrom = var.token_secret_arn }] &&
      jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].linuxParameters == { sharedMemorySize = 5370, initProcessEnabled = true, capabilities = { drop = ["ALL"] } } &&
      jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].ulimits == [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }]
    )
    error_message = "Worker: the token secret, shared memory = object store + 1 GiB and no EFA device, 65536 files."
  }

  assert {
    condition     = jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].logConfiguration.options["awslogs-group"] == "/rayfleet/rayfleet/ray-worker"
    error_message = "Workers log to their own group."
  }

  assert {
    condition = { for k, v in jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[1] : k => v if !contains(["readonlyRootFilesystem", "privileged", "dockerSecurityOptions", "user", "linuxParameters"], k) } == {
      name      = "gpu-metrics"
      image     = var.images["gpu-metrics"]
      essential = false
      memory    = 256
      environment = [
        { name = "RAYFLEET_CLUSTER_NAME", value = "rayfleet" },
        { name = "RAYFLEET_INSTANCE_TYPE", value = "g5.xlarge" },
        { name = "RAYFLEET_IDENTITY_FILE", value = "/etc/rayfleet/identity.json" },
        { name = "RAYFLEET_CURRENT_RUN_DIR", value = "/run/rayfleet" },
        { name = "RAYFLEET_HEALTH_DIR", value = "/run/rayfleet-health" },
      ]
      mountPoints = [
        { sourceVolume = "instance-identity", containerPath = "/etc/rayfleet", readOnly = true },
        { sourceVolume = "current-run", containerPath = "/run/rayfleet", readOnly = true },
        { sourceVolume = "node-health", containerPath = "/run/rayfleet-health", readOnly = false },
      ]
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = "/rayfleet/rayfleet/gpu-metrics"
          awslogs-region        = "us-east-1"
          awslogs-stream-prefix = "gpu-metrics"
        }
      }
    }
    error_message = "The sidecar: not essential, 256 MiB, no GPU reservation, no secrets: ${jsonencode(jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[1])}"
  }

  assert {
    condition     = aws_ecs_task_definition.worker["ddp"].network_mode == "awsvpc"
    error_message = "Without EFA the workers use awsvpc networking (EFA's host networking: fsdp.tftest.hcl)."
  }

  # issue 15 item 1: IMDS is closed to tasks, so the sidecar learns its instance from a file the host writes
  # at boot (infra/modules/cluster/user_data.sh.tftpl); issue 17: the worker watches the Spot notice the host's
  # poller writes beside it. Both mount it read-only; no other task has it.
  assert {
    condition = (
      toset([for v in aws_ecs_task_definition.worker["ddp"].volume : v.name]) == toset(["current-run", "home", "instance-identity", "node-health", "tmp"]) &&
      [for v in aws_ecs_task_definition.worker["ddp"].volume : v.host_path if v.name == "instance-identity"] == ["/etc/rayfleet"] &&
      jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].mountPoints == [
        { sourceVolume = "tmp", containerPath = "/tmp", readOnly = false },
        { sourceVolume = "home", containerPath = "/work", readOnly = false },
        { sourceVolume = "current-run", containerPath = "/run/rayfleet", readOnly = false },
        { sourceVolume = "node-health", containerPath = "/run/rayfleet-health", readOnly = true },
        { sourceVolume = "instance-identity", containerPath = "/etc/rayfleet", readOnly = true },
      ] &&
      toset([for v in aws_ecs_task_definition.head.volume : v.name]) == toset(["home", "tmp"]) && toset([for v in aws_ecs_task_definition.trainer.volume : v.name]) == toset(["home", "tmp"])
    )
    error_message = "Only the worker task has the host's /etc/rayfleet, read-only in both of its containers."
  }

  # issue 15 item 11: the sidecar follows the run using its GPUs through a task volume the training workers
  # write their run's name into (training/rayfleet/train/current_run.py -> monitoring/current_run.py): empty, task-scoped,
  # read-write in ray-worker, read-only in gpu-metrics, the same directory named to both.
  assert {
    condition = (
      [for v in aws_ecs_task_definition.worker["ddp"].volume : v.name if v.host_path == null && length(v.docker_volume_configuration) == 0] == ["current-run", "node-health"] &&
      jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].mountPoints[2] == { sourceVolume = "current-run", containerPath = "/run/rayfleet", readOnly = false }
    )
    error_message = "The current-run volume: no host path, read-write for the worker: ${jsonencode(aws_ecs_task_definition.worker["ddp"].volume)}"
  }

  # ---- the trainer (the job driver) ---------------------------------------------------------------------
  assert {
    condition = {
      for k, v in jsondecode(aws_ecs_task_definition.trainer.container_definitions)[0] : k => v
      if contains(["name", "image", "command", "memory", "secrets", "linuxParameters"], k)
      } == {
      name            = "trainer"
      image           = var.images["trainer"]
      command         = ["ddp"]
      memory          = 5898
      secrets         = [{ name = "RAY_AUTH_TOKEN", valueFrom = var.token_secret_arn }]
      linuxParameters = { sharedMemorySize = 2498, initProcessEnabled = true, capabilities = { drop = ["ALL"] } }
    }
    error_message = "Trainer container: ${aws_ecs_task_definition.trainer.container_definitions}"
  }

  assert {
    condition = (
      !can(jsondecode(aws_ecs_task_definition.trainer.container_definitions)[0].resourceRequirements) &&
      { for e in jsondecode(aws_ecs_task_definition.trainer.container_definitions)[0].environment : e.name => e.value }["RAYFLEET_OBJECT_STORE_MIB"] == "1474"
    )
    error_message = "The trainer reserves no GPU and starts Ray with its own object store size."
  }

  assert {
    condition = {
      for e in jsondecode(aws_ecs_task_definition.trainer.container_definitions)[0].environment : e.name => e.value
      if contains(["RAYFLEET_CLUSTER_NAME", "RAYFLEET_METRICS_NAMESPACE", "AWS_REGION"], e.name)
      } == {
      RAYFLEET_CLUSTER_NAME      = "rayfleet"
      RAYFLEET_METRICS_NAMESPACE = "rayfleet"
      AWS_REGION                 = "us-east-1"
    }
    error_message = "The trainer (the jobs' drivers) names where runs publish training metrics: ${aws_ecs_task_definition.trainer.container_definitions}"
  }

  # ---- the token: in Secrets Manager only, never in Terraform (no version, no value: tests/infra/test_token_auth.py)
  assert {
    condition     = aws_secretsmanager_secret.ray_token.kms_key_id == var.kms_key_arn
    error_message = "The token's secret is encrypted with the deployment's key."
  }

  assert {
    condition = jsondecode(aws_secretsmanager_secret_policy.ray_token.policy).Statement == [
      {
        Sid       = "ExecutionRoleReads"
        Effect    = "Allow"
        Principal = { AWS = var.execution_role_arn }
        Action    = "secretsmanager:GetSecretValue"
        Resource  = "*"
      },
      {
        Sid       = "NobodyElseReads"
        Effect    = "Deny"
        Principal = "*"
        Action    = "secretsmanager:GetSecretValue"
        Resource  = "*"
        Condition = { StringNotEquals = { "aws:PrincipalArn" = var.execution_role_arn } }
      },
      {
        Sid       = "DeployerWrites"
        Effect    = "Allow"
        Principal = { AWS = "arn:aws:iam::123456789012:user/ci" }
        Action    = "secretsmanager:PutSecretValue"
        Resource  = "*"
      },
    ]
    error_message = "Only the execution role reads the token: ${aws_secretsmanager_secret_policy.ray_token.policy}"
  }

  # ---- the services -------------------------------------------------------------------------------------
  assert {
    condition = (
      aws_ecs_service.head.desired_count == 1 && aws_ecs_service.head.deployment_minimum_healthy_percent == 0 &&
      aws_ecs_service.head.deployment_maximum_percent == 100 && aws_ecs_service.head.enable_execute_command &&
      [for s in aws_ecs_service.head.capacity_provider_strategy : s.capacity_provider] == ["rayfleet-head"] &&
      aws_ecs_service.head.task_definition == aws_ecs_task_definition.head.arn
    )
    error_message = "One head, replaced rather than doubled, on the head capacity provider, with ECS Exec."
  }

  # Each group's service starts at its min, 0 by default: no worker runs (and no GPU instance is paid for) until
  # a run or `make start` scales the group; each on its own capacity provider, on its own node group's
  # instances (the ECS attribute its user data sets: run "cluster"), one worker per instance.
  assert {
    condition = alltrue([
      for g, s in aws_ecs_service.worker : (
        s.name == "rayfleet-ray-worker-${g}" && s.desired_count == 0 &&
        s.task_definition == aws_ecs_task_definition.worker[g].arn &&
        [for c in s.capacity_provider_strategy : c.capacity_provider] == ["rayfleet-worker-${g}"] &&
        toset([for p in s.placement_constraints : p.type]) == toset(["memberOf", "distinctInstance"]) &&
        [for p in s.placement_constraints : p.expression if p.type == "memberOf"] == ["attribute:rayfleet.node-group == worker-${g}"] &&
        s.deployment_minimum_healthy_percent == 0 && s.enable_execute_command
      )
    ]) && keys(aws_ecs_service.worker) == ["ddp", "fsdp"]
    error_message = "Two worker services at zero, each on its group's capacity provider and instances: ${jsonencode(aws_ecs_service.worker)}"
  }

  assert {
    condition = (
      length(aws_ecs_service.worker["ddp"].network_configuration) == 1 &&
      aws_ecs_service.worker["ddp"].network_configuration[0].security_groups == toset(["sg-0000000000000ray0"])
    )
    error_message = "ddp workers, one per instance, in the Ray security group (awsvpc)."
  }
}

run "cluster" {
  command = apply

  module {
    source = "./modules/cluster"
  }

  variables {
    name = "rayfleet"
    # what the root gives the module for its default worker_groups (infra/main.tf local.node_groups)
    node_groups = {
      head          = { instance_type = "m5.2xlarge", count = 1, gpus = 0, efa = false, spot = false, placement_group = false, root_volume_gb = 100 }
      "worker-ddp"  = { instance_type = "g5.xlarge", count = 2, gpus = 1, efa = false, spot = false, placement_group = false, root_volume_gb = 200, efa_interfaces = 0, instance_types = ["g5.xlarge"], on_demand_base = 0 }
      "worker-fsdp" = { instance_type = "g5.12xlarge", count = 2, gpus = 4, efa = true, spot = false, placement_group = true, root_volume_gb = 300, efa_interfaces = 1, instance_types = ["g5.12xlarge"], on_demand_base = 0 }
    }
    subnet_ids             = ["subnet-0123456789abcdef0"]
    security_group_ids     = ["sg-00000000instances"]
    efa_security_group_ids = ["sg-0000000000000ray0"]
    instance_profile_arn   = "arn:aws:iam::123456789012:instance-profile/rayfleet-instance"
    kms_key_arn            = var.kms_key_arn
  }

  override_resource {
    target = aws_placement_group.this
    values = {
      id = "rayfleet-worker-fsdp"
    }
  }

  assert {
    condition = (
      output.capacity_providers == merge({ head = "rayfleet-head" }, { for g, w in run.root.worker_groups : "worker-${g}" => w.capacity_provider }) &&
      alltrue([for g, w in run.root.worker_groups : var.node_groups["worker-${g}"].count == w.max_nodes && var.node_groups["worker-${g}"].efa == w.efa])
    )
    error_message = "This run's node groups differ from the root's worker groups."
  }

  assert {
    condition = strcontains(base64decode(aws_launch_template.this["worker-ddp"].user_data), <<-EOT
      cat >> /etc/ecs/ecs.config <<CONFIG
      ECS_CLUSTER=rayfleet
      ECS_INSTANCE_ATTRIBUTES={"rayfleet.node-group":"worker-ddp"}
      ECS_ENABLE_TASK_IAM_ROLE=true
      ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST=false
      ECS_AWSVPC_BLOCK_IMDS=true
      ECS_CONTAINER_STOP_TIMEOUT=120s
      ECS_ENABLE_GPU_SUPPORT=true
      ECS_ENABLE_SPOT_INSTANCE_DRAINING=false
      CONFIG
    EOT
    )
    error_message = "Worker user data: ${base64decode(aws_launch_template.this["worker-ddp"].user_data)}"
  }

  # The ECS attribute the ray module's services are placed by (memberOf attribute:rayfleet.node-group == <key>).
  assert {
    condition = alltrue([
      for k in ["head", "worker-ddp", "worker-fsdp"] :
      strcontains(base64decode(aws_launch_template.this[k].user_data), "ECS_INSTANCE_ATTRIBUTES={\"rayfleet.node-group\":\"${k}\"}\n")
    ])
    error_message = "Every node group's instances carry its key as their rayfleet.node-group attribute."
  }

  # issue 15 item 1: no container reaches the instance role through IMDS; the sidecar reads a file instead.
  assert {
    condition = alltrue([
      for g in ["head", "worker-ddp", "worker-fsdp"] : alltrue([
        !strcontains(base64decode(aws_launch_template.this[g].user_data), "ECS_AWSVPC_BLOCK_IMDS=false"),
        strcontains(base64decode(aws_launch_template.this[g].user_data), "ECS_AWSVPC_BLOCK_IMDS=true\n"),
        strcontains(base64decode(aws_launch_template.this[g].user_data), "iptables -I DOCKER-USER 1 -d 169.254.169.254/32 -j DROP"),
        strcontains(base64decode(aws_launch_template.this[g].user_data), "iptables -I OUTPUT 1 -d 169.254.169.254/32 -m owner ! --uid-owner 0 -j REJECT"),
        strcontains(base64decode(aws_launch_template.this[g].user_data), ":-/etc/rayfleet}") && strcontains(base64decode(aws_launch_template.this[g].user_data), "/identity.json"),
        strcontains(base64decode(aws_launch_template.this[g].user_data), "systemctl enable --now rayfleet-imds-guard.service"),
      ])
    ])
    error_message = "Every node group blocks IMDS for awsvpc tasks (agent), bridge containers (DOCKER-USER) and non-root host-network processes (OUTPUT), and writes the identity file."
  }

  # issue 17: the Spot notice poller is installed everywhere and runs only on Spot groups (none by default).
  assert {
    condition = alltrue([
      for g in ["head", "worker-ddp", "worker-fsdp"] : alltrue([
        strcontains(base64decode(aws_launch_template.this[g].user_data), "/meta-data/spot/instance-action"),
        strcontains(base64decode(aws_launch_template.this[g].user_data), "if [ \"false\" = \"true\" ]; then\n  systemctl enable --now rayfleet-spot-notice.service"),
      ])
    ])
    error_message = "On-demand groups install the Spot notice poller but do not start it."
  }

  assert {
    condition     = strcontains(base64decode(aws_launch_template.this["head"].user_data), "ECS_ENABLE_GPU_SUPPORT=false\n") && strcontains(base64decode(aws_launch_template.this["head"].user_data), "\"rayfleet.node-group\":\"head\"")
    error_message = "The head joins as the head node group, without GPU support."
  }

  assert {
    condition = (
      aws_launch_template.this["worker-ddp"].instance_type == "g5.xlarge" && aws_launch_template.this["head"].instance_type == "m5.2xlarge" &&
      aws_launch_template.this["worker-fsdp"].instance_type == "g5.12xlarge" &&
      aws_launch_template.this["worker-ddp"].vpc_security_group_ids == toset(["sg-00000000instances"]) &&
      length(aws_launch_template.this["worker-ddp"].network_interfaces) == 0 && length(aws_launch_template.this["head"].network_interfaces) == 0 &&
      length(aws_launch_template.this["worker-fsdp"].network_interfaces) == 1 && aws_launch_template.this["worker-fsdp"].vpc_security_group_ids == null
    )
    error_message = "Without EFA (head, ddp) the launch template takes the instances' security group, no interface of its own; fsdp declares its EFA interface."
  }

  assert {
    condition = (
      alltrue([for t in aws_launch_template.this : t.metadata_options[0].http_tokens == "required" && t.metadata_options[0].http_put_response_hop_limit == 1]) &&
      alltrue([for t in aws_launch_template.this : t.block_device_mappings[0].ebs[0].encrypted == "true" && t.block_device_mappings[0].ebs[0].volume_type == "gp3"]) &&
      aws_launch_template.this["worker-ddp"].block_device_mappings[0].ebs[0].volume_size == 200 &&
      aws_launch_template.this["worker-fsdp"].block_device_mappings[0].ebs[0].volume_size == 300 &&
      aws_launch_template.this["head"].block_device_mappings[0].ebs[0].volume_size == 100
    )
    error_message = "IMDSv2 with one hop; encrypted gp3 root volumes of the node group's size."
  }

  assert {
    condition     = aws_launch_template.this["worker-ddp"].image_id == "ami-0123456789abcdef0" && aws_launch_template.this["worker-fsdp"].image_id == "ami-0123456789abcdef0" && data.aws_ssm_parameter.ami["gpu"].name == "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
    error_message = "GPU groups boot the ECS GPU-optimized AMI."
  }

  # Two worker Auto Scaling groups beside the head's, from zero to the group's max, on demand, protected from
  # scale-in; a cluster placement group for fsdp (EFA) only, so its instances share one subnet.
  assert {
    condition = (
      keys(aws_autoscaling_group.this) == ["head", "worker-ddp", "worker-fsdp"] &&
      alltrue([for a in aws_autoscaling_group.this : a.min_size == 0 && a.protect_from_scale_in]) &&
      aws_autoscaling_group.this["worker-ddp"].max_size == 2 && aws_autoscaling_group.this["worker-fsdp"].max_size == 2 &&
      alltrue([for a in aws_autoscaling_group.this : a.mixed_instances_policy[0].instances_distribution[0].on_demand_percentage_above_base_capacity == 100]) &&
      keys(aws_placement_group.this) == ["worker-fsdp"] && aws_placement_group.this["worker-fsdp"].strategy == "cluster" &&
      aws_autoscaling_group.this["worker-fsdp"].placement_group == "rayfleet-worker-fsdp" && aws_autoscaling_group.this["worker-ddp"].placement_group == null &&
      aws_autoscaling_group.this["worker-fsdp"].vpc_zone_identifier == toset(["subnet-0123456789abcdef0"])
    )
    error_message = "Workers scale 0..max on demand, protected from scale-in; a placement group for the EFA group only."
  }

  assert {
    condition = (
      keys(aws_ecs_capacity_provider.this) == ["head", "worker-ddp", "worker-fsdp"] &&
      { for k, c in aws_ecs_capacity_provider.this : k => c.name } == { head = "rayfleet-head", "worker-ddp" = "rayfleet-worker-ddp", "worker-fsdp" = "rayfleet-worker-fsdp" } &&
      aws_ecs_capacity_provider.this["worker-ddp"].auto_scaling_group_provider[0].managed_scaling[0].maximum_scaling_step_size == 2 &&
      aws_ecs_capacity_provider.this["worker-fsdp"].auto_scaling_group_provider[0].managed_scaling[0].maximum_scaling_step_size == 2 &&
      toset(aws_ecs_cluster_capacity_providers.this.capacity_providers) == toset(["rayfleet-head", "rayfleet-worker-ddp", "rayfleet-worker-fsdp"])
    )
    error_message = "A capacity provider per node group, each of which may add all of its group's workers at once, all in the cluster."
  }
}
