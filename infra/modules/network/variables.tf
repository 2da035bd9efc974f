variable "name" {
  description = "Name prefix of every resource of this deployment."
  type        = string
}

variable "cidr" {
  description = "CIDR block of the VPC."
  type        = string
  default     = "10.42.0.0/16"
}

variable "az_count" {
  description = "Availability zones to spread subnets over. One keeps training traffic (and the cluster placement group) in one zone; more survive a zone outage."
  type        = number
  default     = 1

  validation {
    condition     = var.az_count >= 1 && var.az_count <= 4
    error_message = "az_count must be between 1 and 4."
  }
}

variable "availability_zones" {
  description = "Zones to use by name (say [\"us-east-1b\"] where your GPU type has capacity); empty takes the first az_count."
  type        = list(string)
  default     = []
}

variable "interface_endpoints" {
  description = "Create ECR, CloudWatch Logs, Secrets Manager and ECS Exec interface endpoints so image pulls and logs do not cross the NAT (about 7.5 USD a month each per zone)."
  type        = bool
  default     = false
}

variable "ray_ports" {
  description = "Ray's ports, each reachable only from the tasks' own security group: name => {from, to}."
  type        = map(object({ from = number, to = number }))
}

variable "efa" {
  description = "Make the EFA group: all traffic among the workers' EFA interfaces, which EFA requires (only for the EFA shape)."
  type        = bool
  default     = false
}

variable "flow_log_retention_days" {
  description = "Days to keep VPC flow logs."
  type        = number
  default     = 30
}

variable "kms_key_arn" {
  description = "KMS key that encrypts the flow-log group."
  type        = string
}

variable "tags" {
  description = "Tags for every taggable resource."
  type        = map(string)
  default     = {}
}

variable "serve" {
  description = "Ray Serve's port on the head and who may reach it (null: serving off, no group)."
  type = object({
    port                       = number
    allowed_cidrs              = list(string)
    allowed_security_group_ids = list(string)
  })
  default = null
}

variable "bucket_arn" {
  description = "The deployment's bucket: the only one the S3 gateway endpoint lets anything write to."
  type        = string
}

variable "s3_read_buckets" {
  description = "Other buckets (names) the tasks may read through the S3 gateway endpoint, e.g. public datasets in the region."
  type        = list(string)
  default     = []
}
