variable "name" {
  description = "Name prefix; also the ECS cluster's name."
  type        = string
}

variable "node_groups" {
  description = "Per node group (head, worker): instance type and its catalog facts, instance count, root volume, Spot (with further instance types and an on-demand base), EFA (and its EFA interfaces, one per EFA device of the type) and placement group."
  type = map(object({
    instance_type   = string
    count           = number
    gpus            = number
    efa             = bool
    spot            = bool
    placement_group = bool
    root_volume_gb  = number
    efa_interfaces  = optional(number, 0)
    instance_types  = optional(list(string), []) # more than one: the ASG launches any of them (Spot groups)
    on_demand_base  = optional(number, 0)        # Spot groups: this many instances stay on-demand
    model_cache     = optional(bool, false)      # worker groups with models_from = "s3": the node's model cache
  }))

  validation {
    condition     = alltrue([for g in values(var.node_groups) : g.count >= 0 && g.root_volume_gb >= 30])
    error_message = "Every node group needs count >= 0 and root_volume_gb >= 30 (the GPU AMI alone takes 30 GB)."
  }
}

variable "model_cache_dir" {
  description = "The instance's folder for the model cache of the groups with model_cache (on its NVMe store when it has one), owned by the Ray images' user."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets for the instances."
  type        = list(string)
}

variable "security_group_ids" {
  description = "Security groups of the instances' primary interface."
  type        = list(string)
}

variable "efa_security_group_ids" {
  description = "Extra security groups on the EFA interfaces: the Ray tasks' group (Ray's ports) and the EFA group (all traffic among the EFA interfaces, which EFA requires)."
  type        = list(string)
  default     = []
}

variable "instance_profile_arn" {
  description = "Instance profile of the container instances."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key encrypting root volumes and the ECS Exec session log group."
  type        = string
}

variable "log_retention_days" {
  description = "Days to keep ECS Exec session logs."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags for every taggable resource."
  type        = map(string)
  default     = {}
}
