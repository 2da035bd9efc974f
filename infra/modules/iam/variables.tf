variable "name" {
  description = "Name prefix of the roles, the instance profile and the key alias."
  type        = string
}

variable "bucket_arn" {
  description = "Results bucket the tasks read and write."
  type        = string
}

variable "bucket_prefixes" {
  description = "Prefixes of the bucket the tasks may use (the only objects they can touch)."
  type        = list(string)
}

variable "read_only_prefixes" {
  description = "Prefixes of the bucket the tasks may list and read but never write (staged/: the deployer stages a recipe's data there)."
  type        = list(string)
  default     = []
}

variable "worker_autoscaling_group_names" {
  description = "Exact names of the worker groups' Auto Scaling groups (not the head's), whose instances the control task may mark unhealthy; empty: none."
  type        = list(string)
  default     = []
}

variable "queue_prefix" {
  description = "The bucket prefix of the run queue (written by the runs' jobs, within bucket_prefixes), which the control task reads to scale the workers."
  type        = string
}

variable "control_prefix" {
  description = "The bucket prefix only the control task writes (the head's snapshot), outside bucket_prefixes."
  type        = string
}

variable "scaled_services" {
  description = "Names of the ECS services autostop may scale (the control task's role only)."
  type        = list(string)
}

variable "repository_arns" {
  description = "ECR repositories the execution role may pull from."
  type        = list(string)
}

variable "metric_namespace" {
  description = "The only CloudWatch namespace the tasks may publish to."
  type        = string
}

variable "create_autoscaling_service_linked_role" {
  description = "Create Auto Scaling's service-linked role, which the key policy names: true only in an account that has none yet."
  type        = bool
  default     = false
}

variable "serve_tls_secret_arn" {
  description = "The operator's TLS certificate secret for the Serve port (serve.tls_secret_arn), which the execution role may read; null: none."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags for every taggable resource."
  type        = map(string)
  default     = {}
}
