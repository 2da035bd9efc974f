locals {
  catalog   = jsondecode(file("${path.module}/../training/rayfleet/core/instance_types.json")).instance_types
  ray_ports = jsondecode(file("${path.module}/catalog/ray_ports.json"))
  # The registry holds exactly the images that images/ builds: one directory with a Dockerfile each.
  image_names = toset([for f in fileset("${path.module}/../images", "*/Dockerfile") : dirname(f)])
  head        = local.catalog[var.head_instance_type]
  # The worker types: the instance type, then any further Spot types. Tasks are sized to the smallest of them
  # (every type has the same GPUs: variables.tf), so a worker task fits whichever type Spot hands out.
  worker_types = distinct(concat([var.workers.instance_type], var.workers.spot_instance_types))
  worker = merge(local.catalog[var.workers.instance_type], {
    vcpus      = min([for t in local.worker_types : local.catalog[t].vcpus]...)
    memory_mib = min([for t in local.worker_types : local.catalog[t].memory_mib]...)
  })

  node_groups = {
    head = {
      instance_type   = var.head_instance_type
      count           = 1
      gpus            = local.head.gpus
      efa             = false
      spot            = false # the head holds the cluster's state: never on Spot
      placement_group = false
      root_volume_gb  = var.head_root_volume_gb
    }
    worker = {
      instance_type   = var.workers.instance_type
      count           = var.workers.count
      gpus            = local.worker.gpus
      efa             = var.workers.efa
      spot            = var.workers.spot
      placement_group = var.workers.placement_group
      root_volume_gb  = var.workers.root_volume_gb
      efa_interfaces  = var.workers.efa ? local.worker.efa_devices : 0 # one EFA interface per EFA device
      instance_types  = local.worker_types
      on_demand_base  = var.workers.on_demand_base
    }
  }
}

check "efa_supported" {
  assert {
    condition     = !var.workers.efa || local.worker.efa
    error_message = "${var.workers.instance_type} does not support EFA (see training/rayfleet/core/instance_types.json)."
  }
}

module "iam" {
  source             = "./modules/iam"
  name               = var.name
  bucket_arn         = module.storage.bucket_arn
  bucket_prefixes    = module.storage.prefixes
  read_only_prefixes = module.storage.read_only_prefixes
  control_prefix     = module.storage.control_prefix
  queue_prefix       = module.storage.queue_prefix
  # The control task replaces bad worker instances only: every group but the head's, by exact name.
  worker_autoscaling_group_names = [for k, n in module.cluster.autoscaling_group_names : n if k != "head"]
  # tls_secret_arn is null unless serving is on with TLS
  serve_tls_secret_arn = var.serve.enabled ? var.serve.tls_secret_arn : null
  scaled_services      = values(module.ray.service_names)
  repository_arns      = values(module.registry.repository_arns)
  metric_namespace     = module.observability.metric_namespace

  create_autoscaling_service_linked_role = var.create_autoscaling_service_linked_role
}

module "network" {
  source                  = "./modules/network"
  name                    = var.name
  cidr                    = var.vpc_cidr
  az_count                = var.az_count
  availability_zones      = var.availability_zones
  interface_endpoints     = var.interface_endpoints
  ray_ports               = local.ray_ports
  kms_key_arn             = module.iam.kms_key_arn
  bucket_arn              = module.storage.bucket_arn
  s3_read_buckets         = var.s3_read_buckets
  flow_log_retention_days = var.log_retention_days
  efa                     = var.workers.efa
  serve                   = var.serve.enabled ? { port = var.serve.port, allowed_cidrs = var.serve.allowed_cidrs, allowed_security_group_ids = var.serve.allowed_security_group_ids } : null
}

module "storage" {
  source        = "./modules/storage"
  name          = var.name
  kms_key_arn   = module.iam.kms_key_arn
  force_destroy = var.results_force_destroy
}

module "registry" {
  source       = "./modules/registry"
  name         = var.name
  images       = local.image_names
  kms_key_arn  = module.iam.kms_key_arn
  force_delete = true # images are rebuilt from git (make build push); make clean empties the repositories first anyway
}

module "cluster" {
  source                 = "./modules/cluster"
  name                   = var.name
  node_groups            = local.node_groups
  subnet_ids             = module.network.private_subnet_ids
  security_group_ids     = [module.network.instance_security_group_id]
  efa_security_group_ids = concat([module.network.task_security_group_id], var.workers.efa ? [module.network.efa_security_group_id] : [])
  instance_profile_arn   = module.iam.instance_profile_arn
  kms_key_arn            = module.iam.kms_key_arn
  log_retention_days     = var.log_retention_days
}

module "gcs_store" {
  count       = var.gcs_store.enabled ? 1 : 0
  source      = "./modules/gcs_store"
  name        = var.name
  vpc_id      = module.network.vpc_id
  subnet_ids  = module.network.private_subnet_ids
  kms_key_arn = module.iam.kms_key_arn
  node_type   = var.gcs_store.node_type
  replicas    = var.gcs_store.replicas
  # docs/operations.md "The GCS store": a store that no longer loads comes back from one of its snapshots
  snapshot_retention_days = var.gcs_store.snapshot_retention_days
  restore_snapshot        = var.gcs_store.restore_snapshot
}

module "ray" {
  source                = "./modules/ray"
  name                  = var.name
  region                = var.region
  vpc_id                = module.network.vpc_id
  cluster_arn           = module.cluster.cluster_arn
  capacity_providers    = module.cluster.capacity_providers
  subnet_ids            = module.network.private_subnet_ids
  security_group_id     = module.network.task_security_group_id
  images                = { for i in local.image_names : i => "${module.registry.repository_urls[i]}:${var.image_tag}" }
  head_node             = { vcpus = local.head.vcpus, memory_mib = local.head.memory_mib, gpus = local.head.gpus }
  worker_node           = { instance_type = var.workers.instance_type, vcpus = local.worker.vcpus, memory_mib = local.worker.memory_mib, gpus = local.worker.gpus, count = var.workers.count, efa = var.workers.efa, efa_devices = var.workers.efa ? local.worker.efa_devices : 0, efa_rdma = var.workers.efa && local.worker.efa_rdma }
  ray_ports             = local.ray_ports
  object_store_fraction = var.object_store_fraction
  control_task_role_arn = module.iam.control_task_role_arn
  autostop              = var.autostop
  results_bucket        = module.storage.bucket_name
  execution_role_arn    = module.iam.execution_role_arn
  task_role_arn         = module.iam.task_role_arn
  kms_key_arn           = module.iam.kms_key_arn
  log_retention_days    = var.log_retention_days
  serve                 = var.serve.enabled ? { port = var.serve.port, security_group_id = module.network.serve_security_group_id, tls_secret_arn = var.serve.tls_secret_arn } : null
  metric_namespace      = module.observability.metric_namespace
  notify_topic_arn      = module.observability.notifications_topic_arn
  notify_head_stopped   = true
  queue_budget          = var.queue_budget
  queue_max_priority    = var.queue_max_priority
  concurrent_runs       = var.concurrent_runs
  gcs_store             = var.gcs_store.enabled ? { address = module.gcs_store[0].address, port = module.gcs_store[0].port, client_security_group_id = module.gcs_store[0].client_security_group_id } : null
}

module "observability" {
  source        = "./modules/observability"
  cluster_name  = var.name
  region        = var.region
  idle_minutes  = var.idle_alarm_minutes
  alarm_actions = var.alarm_actions
  kms_key_arn   = module.iam.kms_key_arn
  notify_emails = var.notify_emails
  # the ray module's head-stopped rule may publish (it exists: the root always gives that module the topic)
  event_rule_arns = [module.ray.head_stopped_rule_arn]
}
