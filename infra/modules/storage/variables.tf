variable "name" {
  description = "Name prefix; the bucket is <name>-results-<random suffix>."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key for server-side encryption of every object."
  type        = string
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete a bucket that still holds checkpoints and results. Off unless you ask."
  type        = bool
  default     = false
}

variable "checkpoint_ia_days" {
  description = "Days after which objects under runs/ (checkpoints, metrics) move to Standard-IA."
  type        = number
  default     = 30

  validation {
    condition     = var.checkpoint_ia_days >= 30
    error_message = "S3 allows Standard-IA transitions after 30 days at the earliest."
  }
}

variable "run_expiration_days" {
  description = "Days after which objects under runs/ are deleted; null keeps them."
  type        = number
  default     = null
}

variable "noncurrent_version_days" {
  description = "Days to keep overwritten or deleted object versions (a checkpoint's old train_state, say)."
  type        = number
  default     = 7
}

variable "tags" {
  description = "Tags for every taggable resource."
  type        = map(string)
  default     = {}
}
