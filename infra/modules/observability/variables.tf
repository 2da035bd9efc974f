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

variable "kms_key_arn" {
  description = "The deployment's KMS key: encrypts the notifications topic."
  type        = string
}

variable "notify_emails" {
  description = "E-mail addresses subscribed to the notifications topic (each confirms once)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for e in var.notify_emails : can(regex("^[^@ ]+@[^@ ]+\\.[^@ ]+$", e))])
    error_message = "notify_emails: each entry must be an e-mail address."
  }
}

variable "alarm_actions" {
  description = "ARNs notified when the GPUs go idle, besides the notifications topic; empty for none."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags for every taggable resource."
  type        = map(string)
  default     = {}
}

variable "event_rule_arns" {
  description = "EventBridge rules that may publish to the notifications topic (the head-stopped rule)."
  type        = list(string)
  default     = []
}
