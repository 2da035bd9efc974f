variable "name" {
  description = "Name prefix of every resource."
  type        = string
}

variable "region" {
  description = "Region, for the containers' log configuration."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the Cloud Map namespace that names the head."
  type        = string
}

variable "cluster_arn" {
  description = "ECS cluster the services run in."
  type        = string
}

variable "capacity_providers" {
  description = "Capacity provider per node group: head and each worker group's node group."
  type        = map(string)
}

variable "subnet_ids" {
  description = "Private subnets of the tasks."
  type        = list(string)
}

variable "security_group_id" {
  description = "Security group of every Ray task."
  type        = string
}

variable "images" {
  description = "Image URI (with tag) per image that images/ builds: ray-head, ray-worker, trainer, gpu-metrics."
  type        = map(string)
}

variable "head_node" {
  description = "Head node group's instance facts (from infra/catalog): vcpus, memory_mib, gpus."
  type        = object({ vcpus = number, memory_mib = number, gpus = number })
}

variable "worker_groups" {
  description = "Worker groups by name: each group's node group (its ECS attribute and capacity provider key), its instance type's facts (the smallest of its types), min and max nodes, EFA (its devices and whether they do GPUDirect RDMA), the idle minutes before autostop takes it to its min, whether its workers load the preloaded models, and from where: \"image\" (the ray-worker image tagged -models) or \"s3\" (the plain image, and the staged copy taken to the node's cache at task start)."
  type = map(object({
    node_group   = string, instance_type = string, vcpus = number, memory_mib = number, gpus = number,
    min          = number, max = number, efa = bool, efa_devices = optional(number, 0), efa_rdma = optional(bool, false),
    idle_minutes = optional(number, 30), models = optional(bool, false), models_from = optional(string, "image")
  }))
}

variable "ray_ports" {
  description = "Ray's fixed ports, passed to every `ray start` (the security group opens exactly these)."
  type        = map(object({ from = number, to = number }))
}

variable "object_store_fraction" {
  description = "Share of a Ray container's memory given to Ray's object store (and so to /dev/shm)."
  type        = number
  default     = 0.3

  validation {
    condition     = var.object_store_fraction >= 0.05 && var.object_store_fraction <= 0.5
    error_message = "object_store_fraction must be between 0.05 and 0.5."
  }
}

variable "model_cache" {
  description = "The S3 model cache of the groups with models_from = \"s3\": the key (in results_bucket) of the pointer `make push` writes to the staged models, and the instance's folder the user data prepares for the copies."
  type        = object({ pointer_key = string, host_dir = string })
}

variable "results_bucket" {
  description = "Name of the results bucket: the ray-control task writes cluster/ray-status.json there for make status."
  type        = string
}

variable "execution_role_arn" {
  description = "Task execution role: pulls images, writes logs, reads the Ray token secret."
  type        = string
}

variable "task_role_arn" {
  description = "Task role of the Ray containers."
  type        = string
}

variable "control_task_role_arn" {
  description = "Task role of the control task (head snapshot, autostop): writes cluster/, scales the services."
  type        = string
}

variable "autostop" {
  description = "Each worker group to its min after its own idle_minutes (worker_groups) without work on it, and with head = true the head to zero after idle_minutes here, once every group has stopped; 0 turns it off."
  type = object({
    idle_minutes = optional(number, 30)
    head         = optional(bool, false)
  })
  default = {}
}

variable "kms_key_arn" {
  description = "KMS key for the log groups and the Ray token secret."
  type        = string
}

variable "log_retention_days" {
  description = "Days to keep container logs."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags for every taggable resource."
  type        = map(string)
  default     = {}
}

variable "metric_namespace" {
  description = "CloudWatch namespace of the runs' training metrics (the observability module's)."
  type        = string
  default     = "rayfleet"
}

variable "concurrent_runs" {
  description = "Drivers (trainer tasks) the head instance holds at once: each gets an equal share of its 40% for drivers."
  type        = number
  default     = 1
}

variable "queue_budget" {
  description = "The run queue's budget, \"500/month\" or \"2000/total\" (US dollars; empty: none): the trainer holds a run whose projected cost would pass what is left (training/rayfleet/core/run_queue.py)."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^(\\$?[0-9]+(\\.[0-9]+)?(/(month|total))?)?$", var.queue_budget))
    error_message = "queue_budget: write 500/month or 2000/total (US dollars), or leave it empty."
  }
}

variable "queue_max_priority" {
  description = "The highest run priority the queue obeys (0-9): the control task and the trainer's admissions clamp a higher one (RAYFLEET_MAX_PRIORITY)."
  type        = number
  default     = 9

  validation {
    condition     = var.queue_max_priority >= 0 && var.queue_max_priority <= 9 && floor(var.queue_max_priority) == var.queue_max_priority
    error_message = "queue_max_priority: a whole number from 0 to 9."
  }
}

variable "notify_topic_arn" {
  description = "The notifications topic: the trainer's jobs tell it about runs (training/rayfleet/recipes/notify.py)."
  type        = string
  default     = null
}

variable "notify_head_stopped" {
  description = "Tell notify_topic_arn when the head task stops (head_stopped.tf); a plain flag, known at plan, unlike the topic's ARN."
  type        = bool
  default     = false
}

variable "serve" {
  description = "Ray Serve: its port, the group that opens it on the head, and optionally a Secrets Manager secret {\"cert\": PEM, \"key\": PEM} for TLS on it (null: serving off)."
  type        = object({ port = number, security_group_id = string, tls_secret_arn = optional(string) })
  default     = null
}

variable "gcs_store" {
  description = "The head's GCS store (infra/modules/gcs_store): its address and port, and the security group the head joins to reach it (null: the GCS lives in the head's memory only)."
  type        = object({ address = string, port = number, client_security_group_id = string })
  default     = null
}
