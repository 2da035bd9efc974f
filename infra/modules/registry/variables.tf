variable "name" {
  description = "Name prefix; repositories are <name>/<image>."
  type        = string
}

variable "images" {
  description = "Images to hold, one repository each (the directories of images/)."
  type        = set(string)
}

variable "kms_key_arn" {
  description = "KMS key encrypting the repositories."
  type        = string
}

variable "keep_images" {
  description = "Tagged images kept per repository; older ones expire."
  type        = number
  default     = 20
}

variable "force_delete" {
  description = "Let `terraform destroy` delete repositories that still hold images."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every taggable resource."
  type        = map(string)
  default     = {}
}
