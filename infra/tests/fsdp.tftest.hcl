# The FSDP shape: the default's fsdp worker group (up to 2 x g5.12xlarge, 4 GPUs each, EFA, a cluster placement
# group), planned and applied with mocked providers. As in default.tftest.hcl, the task definitions and launch
# templates are read in runs of the modules themselves, given what the root gives them for the default groups
# (the catalog's facts of g5.12xlarge), tied to the root's run by its outputs.

mock_provider "aws" {
  source = "./tests"
}

mock_provider "random" {}

variables {
  model_cache     = { pointer_key = "staged/models.json", host_dir = "/opt/rayfleet/cache" } # as infra/main.tf
  model_cache_dir = "/opt/rayfleet/cache"
  image_tag       = "0123456789ab"
  catalog         = jsondecode(file("../training/rayfleet/core/instance_types.json")).instance_types
  images = {
    "ray-head"    = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rayfleet/ray-head:0123456789ab"
    "ray-worker"  = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rayfleet/ray-worker:0123456789ab"
    "trainer"     = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rayfleet/trainer:0123456789ab"
    "gpu-metrics" = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rayfleet/gpu-metrics:0123456789ab"
  }
  kms_key_arn    = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  results_bucket = "rayfleet-results-0123456789" # the ray module's ray-control writes here
}

run "root" {
  command = apply

  assert {
    condition = (
      output.worker_groups.fsdp.instance_types == tolist(["g5.12xlarge"]) && output.worker_groups.fsdp.efa &&
      output.worker_groups.fsdp.gpus == 4 && output.worker_groups.fsdp.max_nodes == 2 && output.worker_groups.fsdp.min_nodes == 0
    )
    error_message = "The default's fsdp group: up to 2 x g5.12xlarge with EFA, from zero: ${jsonencode(output.worker_groups.fsdp)}"
  }

  assert {
    condition     = output.task_sizes_mib.workers.fsdp == { memory = 176691, shm = 54031, object_store = 53007 }
    error_message = "g5.12xlarge worker sizes changed: ${jsonencode(output.task_sizes_mib.workers.fsdp)}"
  }
}

run "ray" {
  command = apply

  module {
    source = "./modules/ray"
  }

  variables {
    name                  = "rayfleet"
    region                = "us-east-1"
    vpc_id                = "vpc-0123456789abcdef0"
    cluster_arn           = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"
    capacity_providers    = { head = "rayfleet-head", "worker-ddp" = "rayfleet-worker-ddp", "worker-fsdp" = "rayfleet-worker-fsdp" }
    subnet_ids            = ["subnet-0123456789abcdef0"]
    security_group_id     = "sg-0000000000000ray0"
    ray_ports             = jsondecode(file("catalog/ray_ports.json"))
    execution_role_arn    = "arn:aws:iam::123456789012:role/rayfleet-task-execution"
    task_role_arn         = "arn:aws:iam::123456789012:role/rayfleet-task"
    control_task_role_arn = "arn:aws:iam::123456789012:role/rayfleet-control-task"
    head_node             = { vcpus = var.catalog["m5.xlarge"].vcpus, memory_mib = var.catalog["m5.xlarge"].memory_mib, gpus = var.catalog["m5.xlarge"].gpus }
    # what the root gives the module for its default worker_groups (infra/main.tf local.workers)
    worker_groups = {
      ddp = {
        node_group = "worker-ddp", instance_type = "g5.xlarge", vcpus = var.catalog["g5.xlarge"].vcpus, memory_mib = var.catalog["g5.xlarge"].memory_mib,
        gpus       = var.catalog["g5.xlarge"].gpus, min = 0, max = 2, efa = false, idle_minutes = 30
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
      }
    }
  }

  assert {
    condition     = output.sizes_mib.workers == run.root.task_sizes_mib.workers && output.worker_service_names == { for g, w in run.root.worker_groups : g => w.service_name }
    error_message = "This run's inputs differ from what the root gives the ray module for the default groups."
  }

  assert {
    condition = {
      for k, v in jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[0] : k => v
      if contains(["memory", "resourceRequirements", "linuxParameters"], k)
      } == {
      memory               = 176691
      resourceRequirements = [{ type = "GPU", value = "4" }]
      linuxParameters = {
        capabilities       = { drop = ["ALL"] }
        sharedMemorySize   = 54031
        initProcessEnabled = true
        devices = [{
          hostPath      = "/dev/infiniband/uverbs0"
          containerPath = "/dev/infiniband/uverbs0"
          permissions   = ["read", "write", "mknod"]
        }]
      }
    }
    error_message = "An FSDP worker takes all 4 GPUs and the EFA device: ${aws_ecs_task_definition.worker["fsdp"].container_definitions}"
  }

  assert {
    condition = {
      for e in jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[0].environment : e.name => e.value
      if startswith(e.name, "RAYFLEET_NUM_") || e.name == "RAYFLEET_OBJECT_STORE_MIB"
    } == { RAYFLEET_NUM_CPUS = "48", RAYFLEET_NUM_GPUS = "4", RAYFLEET_OBJECT_STORE_MIB = "53007" }
    error_message = "Ray on an FSDP worker announces the instance's 48 vCPUs and 4 GPUs."
  }

  # issue 15 item 9: libfabric's EFA provider for NCCL (through aws-ofi-nccl in the EFA worker image), fork-safe
  # under Ray's forked workers, NCCL's bootstrap off loopback and docker0; GPUDirect RDMA only where the
  # instance type has it (g5 has not: FI_EFA_USE_DEVICE_RDMA=1 would make libfabric refuse the device).
  assert {
    condition = {
      for e in jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[0].environment : e.name => e.value
      if startswith(e.name, "FI_") || startswith(e.name, "NCCL_")
    } == { FI_PROVIDER = "efa", FI_EFA_FORK_SAFE = "1", NCCL_SOCKET_IFNAME = "^lo,docker" }
    error_message = "EFA environment of a g5.12xlarge worker: ${jsonencode(jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[0].environment)}"
  }

  assert {
    condition = jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[0].ulimits == [
      { name = "nofile", softLimit = 65536, hardLimit = 65536 },
      { name = "memlock", softLimit = -1, hardLimit = -1 },
    ]
    error_message = "EFA registers memory with the device: memlock unlimited."
  }

  assert {
    condition     = !can(jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[1].linuxParameters.devices) && !anytrue([for e in jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[1].environment : startswith(e.name, "FI_")])
    error_message = "The sidecar gets no EFA device and no EFA environment."
  }

  assert {
    condition = (
      jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[0].memory + jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[1].memory
      <= var.catalog["g5.12xlarge"].memory_mib * 0.9
    )
    error_message = "Worker and sidecar fit in the 90% of the instance's memory that ECS can place."
  }

  assert {
    condition = (
      aws_ecs_task_definition.worker["fsdp"].network_mode == "host" && length(aws_ecs_service.worker["fsdp"].network_configuration) == 0 &&
      aws_ecs_service.worker["fsdp"].desired_count == 0 &&
      aws_ecs_task_definition.worker["ddp"].network_mode == "awsvpc" && length(aws_ecs_service.worker["ddp"].network_configuration) == 1
    )
    error_message = "EFA on ECS needs host networking: no awsvpc network configuration for the fsdp workers (ddp's stay awsvpc)."
  }

  assert {
    condition     = aws_ecs_task_definition.head.network_mode == "awsvpc" && aws_ecs_task_definition.trainer.network_mode == "awsvpc"
    error_message = "Head and trainer stay on awsvpc."
  }

  assert {
    condition = alltrue([
      for td in [aws_ecs_task_definition.head, aws_ecs_task_definition.worker["ddp"], aws_ecs_task_definition.worker["fsdp"], aws_ecs_task_definition.trainer] :
      alltrue([
        for c in jsondecode(td.container_definitions) :
        lookup(c, "secrets", null) == [{ name = "RAY_AUTH_TOKEN", valueFrom = aws_secretsmanager_secret.ray_token.arn }]
        if startswith(c.name, "ray-") || c.name == "trainer"
      ])
    ])
    error_message = "Every Ray container gets the token from the secret, in the FSDP shape too."
  }

  # Only the EFA group's workers get EFA's devices, environment and memlock; the other group's none of it.
  assert {
    condition = (
      !can(jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].linuxParameters.devices) &&
      !anytrue([for e in jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].environment : startswith(e.name, "FI_") || startswith(e.name, "NCCL_")]) &&
      length(jsondecode(aws_ecs_task_definition.worker["ddp"].container_definitions)[0].ulimits) == 1
    )
    error_message = "EFA reaches the fsdp group's workers only: ${aws_ecs_task_definition.worker["ddp"].container_definitions}"
  }

  assert {
    condition = {
      for e in jsondecode(aws_ecs_task_definition.worker["fsdp"].container_definitions)[0].environment : e.name => e.value
      if e.name == "RAYFLEET_WORKER_GROUP"
    } == { RAYFLEET_WORKER_GROUP = "fsdp" }
    error_message = "fsdp's workers carry their group's Ray label."
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
      head         = { instance_type = "m5.2xlarge", count = 1, gpus = 0, efa = false, spot = false, placement_group = false, root_volume_gb = 100 }
      "worker-ddp" = { instance_type = "g5.xlarge", count = 2, gpus = 1, efa = false, spot = false, placement_group = false, root_volume_gb = 200, efa_interfaces = 0, instance_types = ["g5.xlarge"], on_demand_base = 0 }
      "worker-fsdp" = {
        instance_type   = "g5.12xlarge"
        count           = 2
        gpus            = var.catalog["g5.12xlarge"].gpus
        efa             = true
        spot            = false
        placement_group = true
        root_volume_gb  = 300
        efa_interfaces  = var.catalog["g5.12xlarge"].efa_devices
        instance_types  = ["g5.12xlarge"]
        on_demand_base  = 0
      }
    }
    subnet_ids             = ["subnet-0000000000000az1", "subnet-0000000000000az2"]
    security_group_ids     = ["sg-00000000instances"]
    efa_security_group_ids = ["sg-0000000000000ray0", "sg-00000000000000efa"]
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
      aws_launch_template.this["worker-fsdp"].vpc_security_group_ids == null &&
      length(aws_launch_template.this["worker-fsdp"].network_interfaces) == 1 &&
      aws_launch_template.this["worker-fsdp"].network_interfaces[0].interface_type == "efa" &&
      aws_launch_template.this["worker-fsdp"].network_interfaces[0].device_index == 0 &&
      aws_launch_template.this["worker-fsdp"].network_interfaces[0].security_groups == toset(["sg-00000000instances", "sg-0000000000000ray0", "sg-00000000000000efa"])
    )
    error_message = "With EFA the interface is declared in the launch template, in the instances', the Ray and the EFA groups."
  }

  assert {
    condition     = aws_launch_template.this["worker-fsdp"].block_device_mappings[0].ebs[0].volume_size == 300 && aws_launch_template.this["worker-fsdp"].instance_type == "g5.12xlarge"
    error_message = "FSDP workers: g5.12xlarge with a 300 GB root volume."
  }

  assert {
    condition = (
      keys(aws_placement_group.this) == ["worker-fsdp"] && aws_placement_group.this["worker-fsdp"].strategy == "cluster" &&
      aws_placement_group.this["worker-fsdp"].name == "rayfleet-worker-fsdp" &&
      aws_autoscaling_group.this["worker-fsdp"].placement_group == "rayfleet-worker-fsdp" &&
      aws_autoscaling_group.this["worker-fsdp"].vpc_zone_identifier == toset(["subnet-0000000000000az1"]) &&
      aws_autoscaling_group.this["head"].placement_group == null && aws_autoscaling_group.this["worker-ddp"].placement_group == null &&
      aws_autoscaling_group.this["worker-ddp"].vpc_zone_identifier == toset(["subnet-0000000000000az1", "subnet-0000000000000az2"])
    )
    error_message = "A cluster placement group for the fsdp workers only, and so a single subnet for them (ddp's span the zones)."
  }

  # issue 15 item 9: host-network workers get their task role (the agent serves 169.254.170.2 to them) and,
  # like every container, no IMDS; the head (awsvpc only) does not enable host-mode task roles.
  assert {
    condition = (
      strcontains(base64decode(aws_launch_template.this["worker-fsdp"].user_data), "ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST=true\n") &&
      strcontains(base64decode(aws_launch_template.this["head"].user_data), "ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST=false\n") &&
      strcontains(base64decode(aws_launch_template.this["worker-ddp"].user_data), "ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST=false\n") &&
      strcontains(base64decode(aws_launch_template.this["worker-fsdp"].user_data), "iptables -I OUTPUT 1 -d 169.254.169.254/32 -m owner ! --uid-owner 0 -j REJECT")
    )
    error_message = "EFA workers: task roles in host networking, IMDS closed to non-root host-network processes."
  }

  assert {
    condition = (
      [for n in aws_launch_template.this["worker-fsdp"].network_interfaces : [n.network_card_index, n.device_index, n.interface_type]] == [[0, 0, "efa"]] &&
      length(aws_launch_template.this["head"].network_interfaces) == 0 && length(aws_launch_template.this["worker-ddp"].network_interfaces) == 0
    )
    error_message = "g5.12xlarge has one EFA device: one EFA interface, on network card 0; the other groups none."
  }

  assert {
    condition = (
      aws_autoscaling_group.this["worker-fsdp"].max_size == run.root.worker_groups.fsdp.max_nodes && aws_autoscaling_group.this["worker-fsdp"].min_size == 0 &&
      aws_ecs_capacity_provider.this["worker-fsdp"].auto_scaling_group_provider[0].managed_scaling[0].maximum_scaling_step_size == run.root.worker_groups.fsdp.max_nodes &&
      output.capacity_providers["worker-fsdp"] == run.root.worker_groups.fsdp.capacity_provider
    )
    error_message = "The fsdp group's Auto Scaling group scales from zero to the group's max."
  }
}

# issue 15 item 9: an instance type with several EFA devices (p4d.24xlarge: 4 network cards, GPUDirect RDMA).
# Every device is attached (one EFA interface per network card) and mapped into the worker container.
run "ray_p4d" {
  command = apply

  module {
    source = "./modules/ray"
  }

  variables {
    name                  = "rayfleet"
    region                = "us-east-1"
    vpc_id                = "vpc-0123456789abcdef0"
    cluster_arn           = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"
    capacity_providers    = { head = "rayfleet-head", "worker-p4d" = "rayfleet-worker-p4d" }
    subnet_ids            = ["subnet-0123456789abcdef0"]
    security_group_id     = "sg-0000000000000ray0"
    ray_ports             = jsondecode(file("catalog/ray_ports.json"))
    execution_role_arn    = "arn:aws:iam::123456789012:role/rayfleet-task-execution"
    task_role_arn         = "arn:aws:iam::123456789012:role/rayfleet-task"
    control_task_role_arn = "arn:aws:iam::123456789012:role/rayfleet-control-task"
    head_node             = { vcpus = var.catalog["m5.xlarge"].vcpus, memory_mib = var.catalog["m5.xlarge"].memory_mib, gpus = var.catalog["m5.xlarge"].gpus }
    worker_groups = {
      p4d = {
        node_group    = "worker-p4d"
        instance_type = "p4d.24xlarge"
        vcpus         = var.catalog["p4d.24xlarge"].vcpus
        memory_mib    = var.catalog["p4d.24xlarge"].memory_mib
        gpus          = var.catalog["p4d.24xlarge"].gpus
        min           = 0
        max           = 2
        efa           = true
        efa_devices   = var.catalog["p4d.24xlarge"].efa_devices
        efa_rdma      = var.catalog["p4d.24xlarge"].efa_rdma
      }
    }
  }

  assert {
    condition = jsondecode(aws_ecs_task_definition.worker["p4d"].container_definitions)[0].linuxParameters.devices == [
      for i in range(4) : { hostPath = "/dev/infiniband/uverbs${i}", containerPath = "/dev/infiniband/uverbs${i}", permissions = ["read", "write", "mknod"] }
    ]
    error_message = "A p4d.24xlarge worker maps its 4 EFA devices: ${jsonencode(jsondecode(aws_ecs_task_definition.worker["p4d"].container_definitions)[0].linuxParameters)}"
  }

  assert {
    condition = {
      for e in jsondecode(aws_ecs_task_definition.worker["p4d"].container_definitions)[0].environment : e.name => e.value
      if startswith(e.name, "FI_") || startswith(e.name, "NCCL_")
    } == { FI_PROVIDER = "efa", FI_EFA_FORK_SAFE = "1", FI_EFA_USE_DEVICE_RDMA = "1", NCCL_SOCKET_IFNAME = "^lo,docker" }
    error_message = "p4d: GPUDirect RDMA on (FI_EFA_USE_DEVICE_RDMA=1)."
  }
}

run "cluster_p4d" {
  command = apply

  module {
    source = "./modules/cluster"
  }

  variables {
    name = "rayfleet"
    node_groups = {
      head         = { instance_type = "m5.xlarge", count = 1, gpus = 0, efa = false, spot = false, placement_group = false, root_volume_gb = 100 }
      "worker-p4d" = { instance_type = "p4d.24xlarge", count = 2, gpus = 8, efa = true, spot = false, placement_group = true, root_volume_gb = 300, efa_interfaces = var.catalog["p4d.24xlarge"].efa_devices, instance_types = ["p4d.24xlarge"] }
    }
    subnet_ids             = ["subnet-0000000000000az1"]
    security_group_ids     = ["sg-00000000instances"]
    efa_security_group_ids = ["sg-0000000000000ray0", "sg-00000000000000efa"]
    instance_profile_arn   = "arn:aws:iam::123456789012:instance-profile/rayfleet-instance"
    kms_key_arn            = var.kms_key_arn
  }

  override_resource {
    target = aws_placement_group.this
    values = {
      id = "rayfleet-worker-p4d"
    }
  }

  assert {
    condition = [for n in aws_launch_template.this["worker-p4d"].network_interfaces : [n.network_card_index, n.device_index, n.interface_type]] == [
      [0, 0, "efa"], [1, 1, "efa"], [2, 1, "efa"], [3, 1, "efa"],
    ]
    error_message = "p4d.24xlarge: one EFA interface per network card (card 0 is the primary, device 0)."
  }
}
