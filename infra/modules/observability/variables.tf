variable "cluster_name" {
  description = "ECS cluster name; the sidecar publishes it as the ClusterName dimension."
  type        = string
}

variable "region" {
  description = "Region the dashboard's widgets query."
  type        = string
}

variable "idle_threshold_percent" {
  description = "The idle alarm fires when no GPU of the cluster exceeds this utilization."
  type        = number
  default     = 5

  validation {
    condition     = var.idle_threshold_percent > 0 && var.idle_threshold_percent <= 100
    error_message = "idle_threshold_percent must be in (0, 100]."
  }
}

variable "idle_minutes" {
  description = "How long every GPU must stay under the threshold before the alarm fires (multiple of 5)."
  type        = number
  default     = 30

  validation {
    condition     = var.idle_minutes >= 5 && var.idle_minutes % 5 == 0
    error_message = "idle_minutes must be a positive multiple of 5."
  }
}

variable "alarm_actions" {
  description = "ARNs notified when the GPUs go idle (an SNS topic, say); empty for none."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags for every taggable resource."
  type        = map(string)
  default     = {}
}
