variable "name" {
  description = "Name prefix; the replication group is <name>-gcs."
  type        = string
}

variable "vpc_id" {
  description = "The deployment's VPC."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets the store's nodes are placed in."
  type        = list(string)
}

variable "kms_key_arn" {
  description = "The deployment's KMS key: the store is encrypted at rest with it."
  type        = string
}

variable "node_type" {
  description = "ElastiCache node type. The GCS holds cluster metadata only (kilobytes to a few MiB): the smallest type is plenty."
  type        = string
  default     = "cache.t4g.micro"
}

variable "replicas" {
  description = "Read replicas in other zones, with automatic failover. 0: one node; a lost store node then loses the GCS as a lost head did."
  type        = number
  default     = 0

  validation {
    condition     = var.replicas >= 0 && var.replicas <= 5
    error_message = "replicas must be 0 to 5."
  }
}

variable "engine_version" {
  description = "Valkey version."
  type        = string
  default     = "8.0"
}

variable "port" {
  description = "The store's port."
  type        = number
  default     = 6379
}

variable "snapshot_retention_days" {
  description = "Days of daily snapshots ElastiCache keeps: the way back from a store that no longer loads (docs/operations.md). 1 to 35; 0 (no snapshots) is refused."
  type        = number
  default     = 7

  validation {
    condition     = var.snapshot_retention_days >= 1 && var.snapshot_retention_days <= 35
    error_message = "snapshot_retention_days must be 1 to 35: without snapshots a store that no longer loads cannot be restored."
  }
}

variable "restore_snapshot" {
  description = "Name of an ElastiCache snapshot to seed the store from (recovery from a store that no longer loads: docs/operations.md). Changing it replaces the store. null: an empty store."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
