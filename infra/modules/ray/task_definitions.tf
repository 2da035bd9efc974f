locals {
  # What every Ray container shares: token auth on, the token from the secret only, fixed ports, the head's name.
  ray_environment = concat([
    { name = "RAY_AUTH_MODE", value = "token" },
    { name = "RAYFLEET_HEAD_HOST", value = local.head_dns },
    { name = "RAYFLEET_RAY_PORTS", value = jsonencode(var.ray_ports) },
    # With a GCS store a replaced head takes the cluster back: every node and driver waits for it (Ray's
    # default, 60 s, is shorter than ECS takes to start a new head task).
    # A node then keeps its raylet when the head's name moves (training/rayfleet/node/ray_node.py): Ray reconnects.
    ], var.gcs_store == null ? [] : [
    { name = "RAY_gcs_rpc_server_reconnect_timeout_s", value = "600" },
    { name = "RAYFLEET_GCS_STORE", value = "1" },
  ])
  # Per role: the object store `ray start` gets (it must fit the shared memory above), CPUs and GPUs.
  head_environment = concat(
    [{ name = "RAYFLEET_OBJECT_STORE_MIB", value = tostring(local.head_object_store_mib) }],
    # The GCS in the store (TLS only, verified against the image's CA bundle), under this deployment's
    # namespace; its token comes from head_secrets.
    var.gcs_store == null ? [] : [
      { name = "RAY_REDIS_ADDRESS", value = "rediss://${var.gcs_store.address}:${var.gcs_store.port}" },
      { name = "RAY_REDIS_CA_CERT", value = "/etc/ssl/certs/ca-certificates.crt" },
      { name = "RAY_external_storage_namespace", value = var.name },
  ])
  # The trainer runs the jobs' drivers: where runs publish training metrics (training/rayfleet/train/tracking/cloudwatch.py) and
  # notifications (training/rayfleet/recipes/notify.py), and the queue's budget its runs are admitted against (a job cannot
  # change a task definition's environment).
  trainer_environment = concat([
    { name = "RAYFLEET_OBJECT_STORE_MIB", value = tostring(local.trainer_object_store_mib) },
    { name = "RAYFLEET_CLUSTER_NAME", value = var.name },
    { name = "RAYFLEET_METRICS_NAMESPACE", value = var.metric_namespace },
    { name = "AWS_REGION", value = var.region },
    # Both the control task and the admissions clamp priorities to it, so they order the queue alike.
    { name = "RAYFLEET_MAX_PRIORITY", value = tostring(var.queue_max_priority) },
    ], var.notify_topic_arn == null ? [] : [{ name = "RAYFLEET_NOTIFY_TOPIC_ARN", value = var.notify_topic_arn }],
  var.queue_budget == "" ? [] : [{ name = "RAYFLEET_QUEUE_BUDGET", value = var.queue_budget }])
  worker_environment = { for g, w in var.worker_groups : g => [
    { name = "RAYFLEET_OBJECT_STORE_MIB", value = tostring(local.worker_object_store_mib[g]) },
    { name = "RAYFLEET_NUM_CPUS", value = tostring(w.vcpus) },
    { name = "RAYFLEET_NUM_GPUS", value = tostring(w.gpus) },
    # the Ray label of the node's worker group (training/rayfleet/core/worker_groups.py): runs placed there only
    { name = "RAYFLEET_WORKER_GROUP", value = g },
    { name = "RAYFLEET_CURRENT_RUN_DIR", value = local.current_run_dir },
    # A bad GPU (the sidecar's suspect file) drains the node, naming its instance for the control task, which
    # has it replaced (training/rayfleet/node/control/suspect.py).
    { name = "RAYFLEET_HEALTH_DIR", value = local.health_dir },
    { name = "RAYFLEET_IDENTITY_FILE", value = "/etc/rayfleet/identity.json" },
  ] }
  # Where the gpu-metrics sidecar marks the node suspect (monitoring/node_health.py) for the worker's entry point:
  # read-write in gpu-metrics, read-only in ray-worker; both images own the directory as the sidecar's user.
  health_dir   = "/run/rayfleet-health"
  health_mount = { sourceVolume = "node-health", containerPath = local.health_dir }
  # The run using a worker's GPUs, for the gpu-metrics sidecar's per-run rollup: each Ray Train worker writes
  # its run's name into this task volume (training/rayfleet/train/current_run.py), the sidecar reads it at every sample
  # (monitoring/current_run.py). Read-write in ray-worker, read-only in gpu-metrics; the worker image owns the
  # directory (ECS copies a Dockerfile VOLUME's owner into the task's empty volume).
  current_run_dir   = "/run/rayfleet"
  current_run_mount = { sourceVolume = "current-run", containerPath = local.current_run_dir }
  ray_secrets       = [{ name = "RAY_AUTH_TOKEN", valueFrom = aws_secretsmanager_secret.ray_token.arn }]
  ulimits           = [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }] # Ray opens a socket per worker and object
  # The head alone reads the GCS store's token.
  head_secrets = concat(local.ray_secrets, var.gcs_store == null ? [] : [
    { name = "RAYFLEET_GCS_STORE_PASSWORD", valueFrom = aws_secretsmanager_secret.gcs_store_token[0].arn },
  ])

  # Issue 27 item 5: no container can gain a privilege or change its image. A fixed non-root user (the
  # images' own), no capabilities, no-new-privileges (the images carry no sudo and no setuid file either),
  # and a read-only root file system: what a container writes goes to /dev/shm, the task volumes below
  # (/tmp, /work (HOME): task-scoped Docker volumes, which start as a copy of the image's directory, owner and
  # mode included) and, on workers, /run/rayfleet. tests/infra/test_task_definitions.py checks the rendering.
  locked_down = {
    readonlyRootFilesystem = true
    privileged             = false
    dockerSecurityOptions  = ["no-new-privileges"]
  }
  no_capabilities = { capabilities = { drop = ["ALL"] } }
  scratch_mounts = [
    { sourceVolume = "tmp", containerPath = "/tmp", readOnly = false },
    { sourceVolume = "home", containerPath = "/work", readOnly = false },
  ]
  ray_user = "1000" # the ray user of every Ray image (images/base/ray.Dockerfile)

  logging = { for c in local.components : c => {
    logDriver = "awslogs"
    options = {
      awslogs-group         = aws_cloudwatch_log_group.this[c].name
      awslogs-region        = var.region
      awslogs-stream-prefix = c
    }
  } }

  head_container = merge(local.locked_down, {
    name             = "ray-head"
    user             = local.ray_user
    mountPoints      = local.scratch_mounts
    image            = var.images["ray-head"]
    essential        = true
    command          = ["head"]
    memory           = local.head_memory_mib
    environment      = concat(local.ray_environment, local.head_environment)
    secrets          = local.head_secrets
    ulimits          = local.ulimits
    linuxParameters  = merge(local.no_capabilities, { sharedMemorySize = local.head_shm_mib, initProcessEnabled = true })
    logConfiguration = local.logging["ray-head"]
    stopTimeout      = 120
    healthCheck = {
      command     = ["CMD", "rayfleet-node", "health"]
      interval    = 15
      timeout     = 5
      retries     = 4
      startPeriod = 60
    }
  })

  # The control task (its own task, so its own role: training/rayfleet/node/control/head_snapshot.py): Ray's view (nodes,
  # resources, jobs) every 30 s to s3://<bucket>/cluster/ray-status.json, where `make status` and `make start`
  # read it, and autostop. The head image with the snapshot as its entry point; it reads the head's dashboard
  # by its Cloud Map name with the token and joins no Ray node, so nothing a job runs can land here.
  control_container = merge(local.locked_down, {
    name            = "ray-control"
    user            = local.ray_user
    linuxParameters = merge(local.no_capabilities, { initProcessEnabled = true })
    mountPoints     = local.scratch_mounts
    image           = var.images["ray-head"]
    essential       = true
    entryPoint      = ["python", "-m", "rayfleet.node.control.head_snapshot"]
    command         = ["--bucket", var.results_bucket, "--interval", "30"]
    memory          = local.sidecar_memory_mib
    environment = [
      { name = "RAYFLEET_RAY_PORTS", value = jsonencode(var.ray_ports) },
      { name = "RAYFLEET_HEAD_HOST", value = local.head_dns },
      { name = "AWS_REGION", value = var.region },
      { name = "RAYFLEET_CLUSTER_NAME", value = var.name },
      { name = "RAYFLEET_HEAD_SERVICE", value = local.service_names.head },
      { name = "RAYFLEET_CONTROL_SERVICE", value = local.service_names.control },
      { name = "RAYFLEET_AUTOSTOP_IDLE_MIN", value = tostring(var.autostop.idle_minutes) },
      { name = "RAYFLEET_AUTOSTOP_HEAD", value = tostring(var.autostop.head) },
      { name = "RAYFLEET_MAX_PRIORITY", value = tostring(var.queue_max_priority) },
      # Per worker group (training/rayfleet/core/worker_groups.py ecs_groups_from): its service, a node's shape, its min
      # and max, and its autostop minutes; the queue's scaling, autostop and the suspect-node check act per group.
      { name = "RAYFLEET_WORKER_GROUPS", value = jsonencode({ for g, w in var.worker_groups : g => {
        service = local.worker_service_names[g], vcpus = w.vcpus, gpus = w.gpus, memory_mib = w.memory_mib,
        min     = w.min, max = w.max, idle_minutes = w.idle_minutes
      } }) },
    ]
    secrets          = local.ray_secrets
    logConfiguration = local.logging["ray-control"]
    stopTimeout      = 10
  })

  # EFA (issue 15 item 9): every EFA device of the instance type (one per EFA interface the launch template
  # attaches), NCCL through libfabric's EFA provider (the EFA worker image's aws-ofi-nccl), fork-safe under
  # Ray's forked workers, NCCL's own bootstrap off loopback and docker0, GPUDirect RDMA only where the type has
  # it (libfabric refuses FI_EFA_USE_DEVICE_RDMA=1 on a device without RDMA read, such as g5's), and memlock
  # unlimited, since libfabric pins the buffers it registers with the device.
  efa_devices = { for g, w in var.worker_groups : g => [for i in range(w.efa_devices) : {
    hostPath = "/dev/infiniband/uverbs${i}", containerPath = "/dev/infiniband/uverbs${i}", permissions = ["read", "write", "mknod"]
  }] }
  efa_environment = { for g, w in var.worker_groups : g => w.efa ? concat(
    [{ name = "FI_PROVIDER", value = "efa" }, { name = "FI_EFA_FORK_SAFE", value = "1" }],
    w.efa_rdma ? [{ name = "FI_EFA_USE_DEVICE_RDMA", value = "1" }] : [],
    [{ name = "NCCL_SOCKET_IFNAME", value = "^lo,docker" }],
  ) : [] }
  efa_ulimits = { for g, w in var.worker_groups : g => w.efa ? [{ name = "memlock", softLimit = -1, hardLimit = -1 }] : [] }

  worker_containers = { for g, w in var.worker_groups : g => merge(local.locked_down, {
    name                 = "ray-worker"
    user                 = local.ray_user
    image                = local.models_in_image[g] ? "${var.images["ray-worker"]}-models" : var.images["ray-worker"] # the weights only where read
    essential            = true
    command              = ["worker"]
    memory               = local.worker_memory_mib[g]
    resourceRequirements = [{ type = "GPU", value = tostring(w.gpus) }]
    environment          = concat(local.ray_environment, local.worker_environment[g], local.efa_environment[g], local.model_cache_environment[g])
    secrets              = local.ray_secrets
    ulimits              = concat(local.ulimits, local.efa_ulimits[g])
    linuxParameters = merge(
      local.no_capabilities,
      { sharedMemorySize = local.worker_shm_mib[g], initProcessEnabled = true },
      w.efa ? { devices = local.efa_devices[g] } : {},
    )
    # The host's /etc/rayfleet, read-only: the Spot interruption notice its poller writes there (the entry point
    # drains the Ray node when it appears: training/rayfleet/node/drain.py).
    mountPoints = concat(local.scratch_mounts, [
      merge(local.current_run_mount, { readOnly = false }),
      merge(local.health_mount, { readOnly = true }),
      { sourceVolume = "instance-identity", containerPath = "/etc/rayfleet", readOnly = true },
    ], local.model_cache_mounts[g])
    logConfiguration = local.logging["ray-worker"]
    stopTimeout      = 120
  }) }

  # The sidecar takes no GPU reservation (ECS hands each GPU to one container); its image sets
  # NVIDIA_VISIBLE_DEVICES=all with the utility capability only, so it reads NVML for every GPU, read-only.
  gpu_metrics_containers = { for g, w in var.worker_groups : g => merge(local.locked_down, {
    name            = "gpu-metrics"
    user            = "10001" # images/gpu-metrics/Dockerfile
    linuxParameters = local.no_capabilities
    image           = var.images["gpu-metrics"]
    essential       = false # losing metrics must not stop training
    memory          = local.sidecar_memory_mib
    environment = [
      { name = "RAYFLEET_CLUSTER_NAME", value = var.name },
      { name = "RAYFLEET_INSTANCE_TYPE", value = w.instance_type },
      { name = "RAYFLEET_IDENTITY_FILE", value = "/etc/rayfleet/identity.json" },
      { name = "RAYFLEET_CURRENT_RUN_DIR", value = local.current_run_dir },
      { name = "RAYFLEET_HEALTH_DIR", value = local.health_dir },
    ]
    # The instance id, from the file the host writes at boot: no container may reach IMDS (issue 15 item 1).
    mountPoints = [
      { sourceVolume = "instance-identity", containerPath = "/etc/rayfleet", readOnly = true },
      merge(local.current_run_mount, { readOnly = true }),
      merge(local.health_mount, { readOnly = false }),
    ]
    logConfiguration = local.logging["gpu-metrics"]
  }) }

  trainer_container = merge(local.locked_down, {
    name             = "trainer"
    user             = local.ray_user
    mountPoints      = local.scratch_mounts
    image            = var.images["trainer"]
    essential        = true
    command          = ["ddp"] # launch overrides it with the job and its arguments
    memory           = local.trainer_memory_mib
    environment      = concat(local.ray_environment, local.trainer_environment)
    secrets          = local.ray_secrets
    ulimits          = local.ulimits
    linuxParameters  = merge(local.no_capabilities, { sharedMemorySize = local.trainer_shm_mib, initProcessEnabled = true })
    logConfiguration = local.logging["trainer"]
    stopTimeout      = 120
  })
}

resource "aws_ecs_task_definition" "head" {
  family                   = "${var.name}-ray-head"
  requires_compatibilities = ["EC2"]
  network_mode             = "awsvpc"
  execution_role_arn       = var.execution_role_arn
  task_role_arn            = var.task_role_arn # what every job has: a job can run in the head container
  # With serving on, the gate starts first: while it holds the Serve port, no job on the head can bind it.
  container_definitions = var.serve == null ? jsonencode([local.head_container]) : jsonencode([
    merge(local.head_container, { dependsOn = [{ containerName = "serve-gate", condition = "START" }] }),
    local.serve_gate_container,
  ])
  tags = local.tags

  dynamic "volume" {
    for_each = ["tmp", "home"]
    content {
      name = volume.value
      docker_volume_configuration {
        scope  = "task"
        driver = "local"
      }
    }
  }

  lifecycle {
    precondition {
      condition     = local.head_shm_mib + local.process_floor_mib <= local.head_memory_mib
      error_message = "The head instance type has too little memory for Ray's object store plus 2 GiB (head_memory_mib = ${local.head_memory_mib})."
    }
  }
}

resource "aws_ecs_task_definition" "control" {
  family                   = "${var.name}-ray-control"
  requires_compatibilities = ["EC2"]
  network_mode             = "awsvpc"
  execution_role_arn       = var.execution_role_arn
  task_role_arn            = var.control_task_role_arn
  container_definitions    = jsonencode([local.control_container])
  tags                     = local.tags

  dynamic "volume" {
    for_each = ["tmp", "home"]
    content {
      name = volume.value
      docker_volume_configuration {
        scope  = "task"
        driver = "local"
      }
    }
  }
}

# Groups with models_from = "s3": before the Ray worker starts, the model-cache container (the same plain image,
# the same task role, which may read staged/ and write nothing there) copies the weights `make push` staged into
# the instance's cache folder and checks them against their manifest (training/rayfleet/node/model_cache.py). The
# Ray worker, where the jobs run, mounts that folder read-only: no job can change the weights another run loads.
locals {
  models_in_image = { for g, w in var.worker_groups : g => w.models && w.models_from == "image" }
  models_in_cache = { for g, w in var.worker_groups : g => w.models && w.models_from == "s3" }
  model_cache_dir = "/cache"
  model_cache_environment = { for g, cached in local.models_in_cache : g => cached ? [
    { name = "MODEL_DIR", value = "${local.model_cache_dir}/models" }, # the link the model-cache container places
    { name = "HF_HUB_OFFLINE", value = "1" },
  ] : [] }
  model_cache_mounts = { for g, cached in local.models_in_cache : g => cached ? [
    { sourceVolume = "model-cache", containerPath = local.model_cache_dir, readOnly = true },
  ] : [] }
  model_cache_containers = { for g, cached in local.models_in_cache : g => merge(local.locked_down, {
    name      = "model-cache"
    user      = local.ray_user
    image     = var.images["ray-worker"]
    essential = false # it exits once the copy is placed
    command   = ["model-cache"]
    # A soft reservation, inside the 10% of the instance the worker's sizing leaves (sizing.tf): it downloads
    # and hashes in streams, and runs only before the worker starts.
    memoryReservation = 512
    environment = [
      { name = "RAYFLEET_MODEL_CACHE_POINTER", value = "s3://${var.results_bucket}/${var.model_cache.pointer_key}" },
      { name = "RAYFLEET_DATA_CACHE", value = local.model_cache_dir },
    ]
    linuxParameters  = local.no_capabilities
    mountPoints      = concat(local.scratch_mounts, [{ sourceVolume = "model-cache", containerPath = local.model_cache_dir, readOnly = false }])
    logConfiguration = local.logging["ray-worker"]
  }) }
}

resource "aws_ecs_task_definition" "worker" {
  for_each                 = var.worker_groups
  family                   = "${var.name}-ray-${each.value.node_group}"
  requires_compatibilities = ["EC2"]
  network_mode             = local.worker_mode[each.key]
  execution_role_arn       = var.execution_role_arn
  task_role_arn            = var.task_role_arn
  # The model-cache container has placed the weights before the Ray worker starts (or said in its log why not).
  container_definitions = local.models_in_cache[each.key] ? jsonencode([
    merge(local.worker_containers[each.key], { dependsOn = [{ containerName = "model-cache", condition = "COMPLETE" }] }),
    local.gpu_metrics_containers[each.key], local.model_cache_containers[each.key],
  ]) : jsonencode([local.worker_containers[each.key], local.gpu_metrics_containers[each.key]])
  tags = local.tags

  dynamic "volume" {
    for_each = ["tmp", "home"]
    content {
      name = volume.value
      docker_volume_configuration {
        scope  = "task"
        driver = "local"
      }
    }
  }

  # Written by the instance's root services (infra/modules/cluster/user_data.sh.tftpl): the identity file the sidecar
  # reads, the Spot notice the worker's entry point watches.
  volume {
    name      = "instance-identity"
    host_path = "/etc/rayfleet"
  }

  # The instance's model cache (its NVMe store when it has one: infra/modules/cluster/user_data.sh.tftpl).
  dynamic "volume" {
    for_each = local.models_in_cache[each.key] ? ["model-cache"] : []
    content {
      name      = volume.value
      host_path = var.model_cache.host_dir
    }
  }

  # Task-scoped and empty at start (no host path): the current-run files of this task's training workers.
  volume {
    name = "current-run"
  }

  # Task-scoped and empty at start: the sidecar's verdict on this node's GPUs (suspect.json), for the worker.
  volume {
    name = "node-health"
  }

  lifecycle {
    precondition {
      condition     = each.value.gpus >= 1
      error_message = "Worker group ${each.key} needs a GPU instance type (the catalog lists 0 GPUs for ${each.value.instance_type})."
    }
    precondition {
      condition     = local.worker_shm_mib[each.key] + local.process_floor_mib <= local.worker_memory_mib[each.key]
      error_message = "Worker group ${each.key}: ${each.value.instance_type} has too little memory for Ray's object store plus 2 GiB."
    }
  }
}

resource "aws_ecs_task_definition" "trainer" {
  family                   = "${var.name}-trainer"
  requires_compatibilities = ["EC2"]
  network_mode             = "awsvpc"
  execution_role_arn       = var.execution_role_arn
  task_role_arn            = var.task_role_arn
  container_definitions    = jsonencode([local.trainer_container])
  tags                     = local.tags

  dynamic "volume" {
    for_each = ["tmp", "home"]
    content {
      name = volume.value
      docker_volume_configuration {
        scope  = "task"
        driver = "local"
      }
    }
  }

  lifecycle {
    precondition {
      condition     = local.trainer_shm_mib + local.process_floor_mib <= local.trainer_memory_mib
      error_message = "The head instance type has too little memory for ${var.concurrent_runs} trainer(s) (job drivers: concurrent_runs) beside the head: each gets ${local.trainer_memory_mib} MiB and needs ${local.trainer_shm_mib + local.process_floor_mib}. Lower concurrent_runs or choose a larger head_instance_type."
    }
  }
}
