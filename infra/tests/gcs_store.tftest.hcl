# The head's GCS store (gcs_store.enabled) as Terraform renders it (mocked providers): private, encrypted in
# transit and at rest with the deployment's key, reachable from the head's own group only; its AUTH token is
# in no state (make deploy sets it) and reaches the head container alone, through `secrets`; every Ray node
# waits for a replaced head. With the store off nothing of it exists.

mock_provider "aws" {
  source = "./tests"
}

mock_provider "random" {}

variables {
  model_cache     = { pointer_key = "staged/models.json", host_dir = "/opt/rayfleet/cache" } # as infra/main.tf
  model_cache_dir = "/opt/rayfleet/cache"
  name            = "rayfleet"
  catalog         = jsondecode(file("../training/rayfleet/core/instance_types.json")).instance_types
  ray_ports       = jsondecode(file("catalog/ray_ports.json"))
  image_tag       = "0123456789ab"
  bucket_arn      = "arn:aws:s3:::rayfleet-results-0123456789"
  # the modules' inputs, as default.tftest.hcl gives them
  region                = "us-east-1"
  vpc_id                = "vpc-0123456789abcdef0"
  cluster_arn           = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"
  capacity_providers    = { head = "rayfleet-head", worker = "rayfleet-worker" }
  subnet_ids            = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
  security_group_id     = "sg-0000000000000ray0"
  images                = { "ray-head" = "h:1", "ray-worker" = "w:1", "trainer" = "t:1", "gpu-metrics" = "g:1" }
  execution_role_arn    = "arn:aws:iam::123456789012:role/rayfleet-task-execution"
  task_role_arn         = "arn:aws:iam::123456789012:role/rayfleet-task"
  control_task_role_arn = "arn:aws:iam::123456789012:role/rayfleet-control-task"
  kms_key_arn           = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  results_bucket        = "rayfleet-results-0123456789"
  head_node             = { vcpus = 4, memory_mib = 16384, gpus = 0 }
  worker_groups         = { default = { node_group = "worker", instance_type = "g5.xlarge", vcpus = 4, memory_mib = 16384, gpus = 1, min = 2, max = 2, efa = false } }
}

run "store" {
  command = apply

  module {
    source = "./modules/gcs_store"
  }

  override_resource {
    target = aws_security_group.store
    values = { id = "sg-00000000000store0" }
  }

  override_resource {
    target = aws_security_group.client
    values = { id = "sg-0000000000client0" }
  }

  assert {
    condition = (
      aws_elasticache_replication_group.store.transit_encryption_enabled &&
      aws_elasticache_replication_group.store.transit_encryption_mode == "required" &&
      aws_elasticache_replication_group.store.at_rest_encryption_enabled &&
      aws_elasticache_replication_group.store.kms_key_id == var.kms_key_arn
    )
    error_message = "The store takes TLS only and is encrypted at rest with the deployment's key."
  }

  assert {
    condition     = aws_elasticache_replication_group.store.auth_token == null && aws_elasticache_replication_group.store.auth_token_update_strategy == null
    error_message = "No AUTH token in the configuration, hence none in state: make deploy sets it."
  }

  assert {
    condition = (
      toset(aws_elasticache_subnet_group.store.subnet_ids) == toset(var.subnet_ids) &&
      aws_elasticache_replication_group.store.subnet_group_name == aws_elasticache_subnet_group.store.name &&
      aws_elasticache_replication_group.store.security_group_ids == toset(["sg-00000000000store0"])
    )
    error_message = "The store lives in the given (private) subnets, in its own group only."
  }

  assert {
    condition = (
      aws_vpc_security_group_ingress_rule.store_from_head.security_group_id == "sg-00000000000store0" &&
      aws_vpc_security_group_ingress_rule.store_from_head.referenced_security_group_id == "sg-0000000000client0" &&
      aws_vpc_security_group_ingress_rule.store_from_head.cidr_ipv4 == null &&
      aws_vpc_security_group_ingress_rule.store_from_head.from_port == 6379 &&
      aws_vpc_security_group_ingress_rule.store_from_head.to_port == 6379 &&
      aws_vpc_security_group_egress_rule.head_to_store.security_group_id == "sg-0000000000client0" &&
      aws_vpc_security_group_egress_rule.head_to_store.referenced_security_group_id == "sg-00000000000store0"
    )
    error_message = "The store's one way in is its port, from the head's client group, never a CIDR."
  }

  assert {
    condition     = aws_elasticache_replication_group.store.num_cache_clusters == 1 && !aws_elasticache_replication_group.store.automatic_failover_enabled && output.client_security_group_id == "sg-0000000000client0"
    error_message = "By default one node (replicas = 0), and the client group is the module's output."
  }
}

# issue 54 R5: the store is the cluster's memory across head replacements; a write that leaves it unloadable
# (a job holding the token can write it) is undone from a daily snapshot, so snapshots cannot be turned off.
run "store_keeps_snapshots" {
  command = plan

  module {
    source = "./modules/gcs_store"
  }

  assert {
    condition     = aws_elasticache_replication_group.store.snapshot_retention_limit == 7 && aws_elasticache_replication_group.store.snapshot_name == null
    error_message = "By default a week of daily snapshots, and an empty store."
  }
}

run "store_restored_from_a_snapshot" {
  command = plan

  module {
    source = "./modules/gcs_store"
  }

  variables {
    restore_snapshot = "rayfleet-gcs-2026-11-23"
  }

  assert {
    condition     = aws_elasticache_replication_group.store.snapshot_name == "rayfleet-gcs-2026-11-23"
    error_message = "The store is seeded from the named snapshot."
  }
}

run "store_snapshots_cannot_be_turned_off" {
  command = plan

  module {
    source = "./modules/gcs_store"
  }

  variables {
    snapshot_retention_days = 0
  }

  expect_failures = [var.snapshot_retention_days]
}

run "store_with_a_replica" {
  command = plan

  module {
    source = "./modules/gcs_store"
  }

  variables {
    replicas = 1
  }

  assert {
    condition     = aws_elasticache_replication_group.store.num_cache_clusters == 2 && aws_elasticache_replication_group.store.automatic_failover_enabled && aws_elasticache_replication_group.store.multi_az_enabled
    error_message = "A replica is in another zone, with automatic failover."
  }
}

run "head_on_the_store" {
  command = apply

  module {
    source = "./modules/ray"
  }

  variables {
    gcs_store = { address = "rayfleet-gcs.abc123.ng.0001.use1.cache.amazonaws.com", port = 6379, client_security_group_id = "sg-0000000000client0" }
  }

  override_resource {
    target = aws_secretsmanager_secret.gcs_store_token
    values = { arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/gcs-store-token-AbCdEf" }
  }

  assert {
    condition = (
      contains(jsondecode(aws_ecs_task_definition.head.container_definitions)[0].environment, { name = "RAY_REDIS_ADDRESS", value = "rediss://rayfleet-gcs.abc123.ng.0001.use1.cache.amazonaws.com:6379" }) &&
      contains(jsondecode(aws_ecs_task_definition.head.container_definitions)[0].environment, { name = "RAY_external_storage_namespace", value = "rayfleet" }) &&
      contains(jsondecode(aws_ecs_task_definition.head.container_definitions)[0].secrets, { name = "RAYFLEET_GCS_STORE_PASSWORD", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/gcs-store-token-AbCdEf" })
    )
    error_message = "The head starts on the store over TLS, under the deployment's namespace, its token from secrets: ${aws_ecs_task_definition.head.container_definitions}"
  }

  assert {
    condition = (
      !strcontains(jsonencode(jsondecode(aws_ecs_task_definition.head.container_definitions)[0].environment), "GCS_STORE_PASSWORD") &&
      !strcontains(aws_ecs_task_definition.worker["default"].container_definitions, "gcs-store-token") &&
      !strcontains(aws_ecs_task_definition.trainer.container_definitions, "gcs-store-token") &&
      !strcontains(aws_ecs_task_definition.worker["default"].container_definitions, "RAY_REDIS_ADDRESS")
    )
    error_message = "The store's token is in no environment and reaches no container but the head's."
  }

  assert {
    condition = alltrue([for td in [aws_ecs_task_definition.head, aws_ecs_task_definition.worker["default"], aws_ecs_task_definition.trainer] :
      contains(jsondecode(td.container_definitions)[0].environment, { name = "RAY_gcs_rpc_server_reconnect_timeout_s", value = "600" }) &&
    contains(jsondecode(td.container_definitions)[0].environment, { name = "RAYFLEET_GCS_STORE", value = "1" })])
    error_message = "Every Ray node, the trainer's driver included, waits up to 10 minutes for a replaced head and keeps its raylet."
  }

  assert {
    condition = (
      one(aws_ecs_service.head.network_configuration).security_groups == toset(["sg-0000000000000ray0", "sg-0000000000client0"]) &&
      one(aws_ecs_service.worker["default"].network_configuration).security_groups == toset(["sg-0000000000000ray0"])
    )
    error_message = "The head service alone joins the store's client group."
  }

  assert {
    condition     = aws_secretsmanager_secret.gcs_store_token[0].kms_key_id == var.kms_key_arn && jsondecode(aws_secretsmanager_secret_policy.gcs_store_token[0].policy) == jsondecode(aws_secretsmanager_secret_policy.ray_token.policy)
    error_message = "The store's token is KMS-encrypted and only the execution role reads it, as the Ray token."
  }
}

run "no_store" {
  command = apply

  module {
    source = "./modules/ray"
  }

  assert {
    condition = (
      length(aws_secretsmanager_secret.gcs_store_token) == 0 && output.gcs_store_secret_arn == null &&
      !strcontains(aws_ecs_task_definition.head.container_definitions, "RAY_REDIS_ADDRESS") &&
      !strcontains(aws_ecs_task_definition.worker["default"].container_definitions, "reconnect_timeout") &&
      !strcontains(aws_ecs_task_definition.worker["default"].container_definitions, "RAYFLEET_GCS_STORE")
    )
    error_message = "Without a store the GCS stays in the head's memory: no secret, no address, Ray's default wait."
  }
}
