# The Ray head's GCS kept outside the head (GCS fault tolerance): a Valkey replication group in the private
# subnets that only the head reaches. A replaced head starts on the same store and namespace, takes back the
# cluster's actors, placement groups and jobs, and the workers and the trainer's driver rejoin it: a running
# run goes on. The store's AUTH token is never in Terraform: `make deploy` sets it with ModifyReplicationGroup
# and writes it to the ray module's secret (scripts/rayfleet/ecs/rotate_token.py), which only the task execution role
# reads, into the head container's `secrets`.
locals {
  tags = merge(var.tags, { Component = "gcs-store" })
}

# Two groups so that the head alone, not every task of the cluster's shared group, reaches the store.
resource "aws_security_group" "store" {
  name_prefix = "${var.name}-gcs-store-"
  description = "GCS store of ${var.name}: its port from the Ray head only, nothing out"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-gcs-store" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_security_group" "client" {
  # checkov:skip=CKV2_AWS_5: attached to the head service in the ray module, which this check cannot follow
  name_prefix = "${var.name}-gcs-client-"
  description = "The Ray head of ${var.name}, the only client of its GCS store"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-gcs-client" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "store_from_head" {
  security_group_id            = aws_security_group.store.id
  referenced_security_group_id = aws_security_group.client.id
  ip_protocol                  = "tcp"
  from_port                    = var.port
  to_port                      = var.port
  description                  = "The GCS store from the Ray head"
  tags                         = local.tags
}

resource "aws_vpc_security_group_egress_rule" "head_to_store" {
  security_group_id            = aws_security_group.client.id
  referenced_security_group_id = aws_security_group.store.id
  ip_protocol                  = "tcp"
  from_port                    = var.port
  to_port                      = var.port
  description                  = "The Ray head to its GCS store"
  tags                         = local.tags
}

resource "aws_elasticache_subnet_group" "store" {
  name        = "${var.name}-gcs-store"
  description = "Private subnets of ${var.name} for its GCS store"
  subnet_ids  = var.subnet_ids
  tags        = local.tags
}

resource "aws_elasticache_replication_group" "store" {
  # checkov:skip=CKV_AWS_31: the AUTH token is set by make deploy (ModifyReplicationGroup), so that it is in no state file
  # checkov:skip=CKV2_AWS_50: one node by default (it bills every hour); replicas >= 1 turns on Multi-AZ failover
  replication_group_id       = "${var.name}-gcs"
  description                = "Ray GCS store of ${var.name}"
  engine                     = "valkey"
  engine_version             = var.engine_version
  node_type                  = var.node_type
  port                       = var.port
  num_cache_clusters         = 1 + var.replicas
  automatic_failover_enabled = var.replicas > 0
  multi_az_enabled           = var.replicas > 0
  subnet_group_name          = aws_elasticache_subnet_group.store.name
  security_group_ids         = [aws_security_group.store.id]
  at_rest_encryption_enabled = true
  kms_key_id                 = var.kms_key_arn
  transit_encryption_enabled = true
  transit_encryption_mode    = "required"
  snapshot_retention_limit   = var.snapshot_retention_days
  snapshot_name              = var.restore_snapshot # a new store from a good snapshot; the token is set anew
  auto_minor_version_upgrade = true
  tags                       = local.tags
}
