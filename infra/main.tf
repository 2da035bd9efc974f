locals {
  catalog   = jsondecode(file("${path.module}/../training/rayfleet/core/instance_types.json")).instance_types
  ray_ports = jsondecode(file("${path.module}/catalog/ray_ports.json"))
  # The registry holds exactly the images that images/ builds: one directory with a Dockerfile each.
  image_names = toset([for f in fileset("${path.module}/../images", "*/Dockerfile") : dirname(f)])
  head        = local.catalog[var.head_instance_type]
  # Each worker group's node group: "worker-<group>", and "worker" for a group named default, whose resources
  # are those of the single worker group of earlier versions (moved.tf), so such a deployment keeps its workers.
  worker_node_group = { for g in keys(var.worker_groups) : g => g == "default" ? "worker" : "worker-${g}" }
  # Tasks are sized to the smallest of a group's types (every type has the same GPUs: variables.tf), so a
  # worker task fits whichever type the Auto Scaling group launches.
  workers = { for g, w in var.worker_groups : g => merge(local.catalog[w.instance_types[0]], w, {
    node_group      = local.worker_node_group[g]
    instance_type   = w.instance_types[0]
    vcpus           = min([for t in w.instance_types : local.catalog[t].vcpus]...)
    memory_mib      = min([for t in w.instance_types : local.catalog[t].memory_mib]...)
    placement_group = coalesce(w.placement_group, w.efa)
    idle_minutes    = coalesce(w.idle_minutes, var.autostop.idle_minutes)
  }) }
  any_efa = anytrue([for w in values(var.worker_groups) : w.efa])
  # The S3 model cache (worker groups with models_from = "s3"): the pointer `make push` writes to the staged
  # weights (its key: training/rayfleet/core/bucket.py MODEL_CACHE), and the instances' folder for their copies.
  model_cache = { pointer_key = "staged/models.json", host_dir = "/opt/rayfleet/cache" }

  node_groups = merge({
    head = {
      instance_type   = var.head_instance_type
      count           = 1
      gpus            = local.head.gpus
      efa             = false
      spot            = false # the head holds the cluster's state: never on Spot
      placement_group = false
      root_volume_gb  = var.head_root_volume_gb
    }
    }, { for g, w in local.workers : w.node_group => {
      instance_type   = w.instance_type
      count           = w.max
      gpus            = w.gpus
      efa             = w.efa
      spot            = w.spot != "on-demand"
      placement_group = w.placement_group
      root_volume_gb  = w.root_volume_gb
      efa_interfaces  = w.efa ? w.efa_devices : 0 # one EFA interface per EFA device
      instance_types  = w.instance_types
      on_demand_base  = w.on_demand_base
      model_cache     = w.models && w.models_from == "s3" # its nodes keep the staged weights on NVMe
  } })
}

check "efa_supported" {
  assert {
    condition     = alltrue([for w in values(local.workers) : !w.efa || w.efa_devices > 0])
    error_message = "EFA is asked for on a worker group whose type does not support it: ${join(", ", [for g, w in local.workers : "${g} (${w.instance_type})" if w.efa && w.efa_devices == 0])} (see training/rayfleet/core/instance_types.json)."
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
  scaled_services      = module.ray.service_names
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
  efa                     = local.any_efa
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
  model_cache_dir        = local.model_cache.host_dir
  subnet_ids             = module.network.private_subnet_ids
  security_group_ids     = [module.network.instance_security_group_id]
  efa_security_group_ids = concat([module.network.task_security_group_id], local.any_efa ? [module.network.efa_security_group_id] : [])
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
  source             = "./modules/ray"
  name               = var.name
  region             = var.region
  vpc_id             = module.network.vpc_id
  cluster_arn        = module.cluster.cluster_arn
  capacity_providers = module.cluster.capacity_providers
  subnet_ids         = module.network.private_subnet_ids
  security_group_id  = module.network.task_security_group_id
  images             = { for i in local.image_names : i => "${module.registry.repository_urls[i]}:${var.image_tag}" }
  head_node          = { vcpus = local.head.vcpus, memory_mib = local.head.memory_mib, gpus = local.head.gpus }
  worker_groups = { for g, w in local.workers : g => {
    node_group   = w.node_group, instance_type = w.instance_type, vcpus = w.vcpus, memory_mib = w.memory_mib, gpus = w.gpus,
    min          = w.min, max = w.max, efa = w.efa, efa_devices = w.efa ? w.efa_devices : 0, efa_rdma = w.efa && w.efa_rdma,
    idle_minutes = w.idle_minutes, models = w.models, models_from = w.models_from
  } }
  ray_ports             = local.ray_ports
  object_store_fraction = var.object_store_fraction
  control_task_role_arn = module.iam.control_task_role_arn
  autostop              = var.autostop
  results_bucket        = module.storage.bucket_name
  model_cache           = local.model_cache
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
