variable "region" {
  description = "AWS region of the deployment."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Name prefix of every resource: two deployments with different names never collide in one account."
  type        = string
  default     = "rayfleet"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.name))
    error_message = "name must be 3-20 characters of lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "vpc_cidr" {
  description = "CIDR block of the VPC."
  type        = string
  default     = "10.42.0.0/16"
}

variable "az_count" {
  description = "Availability zones for the subnets (1 keeps training traffic and a placement group in one zone)."
  type        = number
  default     = 1
}

variable "availability_zones" {
  description = "Zones by name, for GPU types that some zones lack; empty takes the first az_count of the region."
  type        = list(string)
  default     = []
}

variable "interface_endpoints" {
  description = "Add ECR, logs, Secrets Manager, ECS Exec and CloudWatch interface endpoints (image pulls skip the NAT)."
  type        = bool
  default     = false
}

variable "head_instance_type" {
  description = "Instance type of the head node (no GPU needed: the head schedules, it does not train; it also holds the runs' drivers, concurrent_runs of them). Must be in training/rayfleet/core/instance_types.json."
  type        = string
  default     = "m5.2xlarge" # room for 2 drivers: a DDP run and an FSDP run at once, one per worker group
}

variable "head_root_volume_gb" {
  description = "Root volume of the head instance, in GB (gp3, encrypted)."
  type        = number
  default     = 100
}

variable "worker_groups" {
  description = <<-EOT
    Worker groups, by name (the Ray label of their nodes; recipes may name one, else rayfleet picks the cheapest
    that fits). Per group: its instance types (one or more, the same GPU count, the first preferred; all in
    training/rayfleet/core/instance_types.json), min and max nodes (min 0: nothing runs, nothing is paid, until a
    run needs the group), Spot ("on-demand"; "spot-only"; "spot-preferred": Spot, and a run whose Spot capacity
    does not come falls back to on-demand in the group: scripts/rayfleet/ecs/fallback.py) with on_demand_base
    nodes that stay on-demand, EFA (with a
    cluster placement group unless placement_group = false), the root volume, and idle_minutes before autostop
    takes the group to its min (default: autostop.idle_minutes), and models: its workers load the preloaded models
    (`make build`) from their own node, the other groups' workers hold none. models_from says where a node gets
    them: "image" (default), the ray-worker image with the weights as its last layer (tag <image_tag>-models);
    "s3", the plain ray-worker image and a copy of the weights that `make push` stages to the bucket, taken to the
    instance's NVMe (or root volume) at task start and checked against its manifest (images/README.md compares
    the two). The default holds the flagships' two shapes.
  EOT
  type = map(object({
    instance_types  = list(string)
    min             = optional(number, 0)
    max             = optional(number, 2)
    spot            = optional(string, "on-demand")
    on_demand_base  = optional(number, 0)
    efa             = optional(bool, false)
    placement_group = optional(bool)
    root_volume_gb  = optional(number, 200)
    idle_minutes    = optional(number)
    models          = optional(bool, false)
    models_from     = optional(string, "image")
  }))
  default = {
    ddp = { instance_types = ["g5.xlarge"], max = 2 } # 1 x A10G per node
    # 4 x A10G per node, EFA; its workers run the image with the preloaded models (dolly-v2-7b)
    fsdp = { instance_types = ["g5.12xlarge"], max = 2, efa = true, root_volume_gb = 300, models = true }
  }

  validation {
    condition     = length(var.worker_groups) >= 1 && alltrue([for g in keys(var.worker_groups) : can(regex("^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$", g)) && g != "head"])
    error_message = "worker_groups needs at least one group, each named by 1-20 lower-case letters, digits and '-' (starting with a letter), not head: the name is a Ray label and part of AWS names."
  }

  validation {
    condition     = alltrue([for g in values(var.worker_groups) : contains(["image", "s3"], g.models_from)])
    error_message = "A worker group's models_from is \"image\" (the weights in the ray-worker image) or \"s3\" (copied from the bucket to the node at task start)."
  }

  validation {
    condition     = alltrue([for g in values(var.worker_groups) : length(g.instance_types) >= 1])
    error_message = "Every worker group needs at least one instance type (instance_types = [\"g5.xlarge\"])."
  }

  validation {
    condition = alltrue(flatten([
      for g in values(var.worker_groups) : [
        for t in g.instance_types :
        lookup(jsondecode(file("${path.module}/../training/rayfleet/core/instance_types.json")).instance_types, t, { gpus = -1 }).gpus ==
        lookup(jsondecode(file("${path.module}/../training/rayfleet/core/instance_types.json")).instance_types, g.instance_types[0], { gpus = -2 }).gpus
      ] if length(g.instance_types) >= 1
    ]))
    error_message = "Every instance type of a worker group must be in training/rayfleet/core/instance_types.json with as many GPUs as the group's first type."
  }

  validation {
    condition     = alltrue([for g in values(var.worker_groups) : g.min >= 0 && g.max >= 1 && g.max <= 64 && g.min <= g.max && floor(g.min) == g.min && floor(g.max) == g.max])
    error_message = "Every worker group needs whole numbers 0 <= min <= max, with max from 1 to 64."
  }

  validation {
    condition     = alltrue([for g in values(var.worker_groups) : contains(["on-demand", "spot-preferred", "spot-only"], g.spot)])
    error_message = "A worker group's spot is \"on-demand\", \"spot-only\" or \"spot-preferred\" (Spot, falling back to on-demand when a run's Spot capacity does not come)."
  }

  validation {
    condition     = alltrue([for g in values(var.worker_groups) : g.on_demand_base >= 0 && g.on_demand_base <= g.max && (g.on_demand_base == 0 || g.spot != "on-demand")])
    error_message = "A worker group's on_demand_base must be between 0 and its max, and only means something on Spot."
  }

  validation {
    condition     = alltrue([for g in values(var.worker_groups) : !g.efa || length(g.instance_types) == 1])
    error_message = "An EFA worker group has one instance type (one EFA interface layout per launch template)."
  }

  validation {
    condition     = alltrue([for g in values(var.worker_groups) : g.idle_minutes == null || try(g.idle_minutes >= 0, false)])
    error_message = "A worker group's idle_minutes is 0 (never stopped) or more."
  }
}

# The single worker group of earlier versions, refused with the entry that keeps the same workers.
variable "workers" {
  description = "Replaced by worker_groups: a deployment that sets it is refused with the equivalent worker_groups entry (a group named default keeps the workers' resources)."
  type        = any
  default     = null

  validation {
    condition = var.workers == null
    error_message = "`workers` is replaced by `worker_groups` (and the default head is now m5.2xlarge: head_instance_type = \"m5.xlarge\" and concurrent_runs = 1 keep yours, as infra/one-group.tfvars does); the same workers, kept in place, are: worker_groups = ${jsonencode({ default = merge(
      {
        instance_types = distinct(concat([try(var.workers.instance_type, "g5.xlarge")], try(var.workers.spot_instance_types, [])))
        max            = try(var.workers.count, 2)
        spot           = try(var.workers.spot, false) ? "spot-only" : "on-demand"
      },
      try(var.workers.on_demand_base, 0) > 0 ? { on_demand_base = var.workers.on_demand_base } : {},
      try(var.workers.efa, false) ? { efa = true } : {},
      try(var.workers.efa, false) != try(var.workers.placement_group, false) ? { placement_group = try(var.workers.placement_group, false) } : {},
      try(var.workers.root_volume_gb, 200) != 200 ? { root_volume_gb = var.workers.root_volume_gb } : {},
    ) })}"
  }
}

variable "autostop" {
  description = "Idle GPUs stop by themselves: each worker group goes to its min after its idle minutes (worker_groups.idle_minutes, default idle_minutes here) without a run on it, or with no Ray job, Serve application or trainer task at all; with head = true the head stops too, after every group and idle_minutes, unless a group keeps nodes (min above 0 or idle_minutes 0); 0 keeps the head up and turns it off for every group without idle_minutes of its own. make start, or make run, brings them back."
  type = object({
    idle_minutes = optional(number, 30)
    head         = optional(bool, false)
  })
  default = {}

  validation {
    condition     = var.autostop.idle_minutes >= 0
    error_message = "autostop.idle_minutes must be 0 (off) or more."
  }
}

variable "concurrent_runs" {
  description = "Recipe runs at once: each run's driver (its trainer task) takes an equal share of the head instance's 40% for drivers, and a run beyond them waits for a slot. 1 fits every head type; 2 (the default: one run per default worker group) needs m5.2xlarge or larger (a plan that cannot fit them is refused)."
  type        = number
  default     = 2

  validation {
    condition     = var.concurrent_runs >= 1 && var.concurrent_runs <= 8 && floor(var.concurrent_runs) == var.concurrent_runs
    error_message = "concurrent_runs must be a whole number from 1 to 8."
  }
}

variable "serve" {
  description = "Ray Serve (make serve): on the head's private DNS name, on one port, only from the listed CIDRs and security groups; every request needs the API key in Secrets Manager."
  type = object({
    enabled                    = optional(bool, false)
    port                       = optional(number, 8000)
    allowed_cidrs              = optional(list(string), [])
    allowed_security_group_ids = optional(list(string), [])
    tls_secret_arn             = optional(string)
  })
  default = {}

  validation {
    condition     = var.serve.port >= 1024 && var.serve.port <= 65535 && !anytrue([for r in values(jsondecode(file("${path.module}/catalog/ray_ports.json"))) : var.serve.port >= r.from && var.serve.port <= r.to])
    error_message = "serve.port must be 1024-65535 and outside every port and port range of Ray's (infra/catalog/ray_ports.json: its workers' and collectives' ranges too)."
  }

  validation {
    # Serve's own proxy listens on 127.0.0.1:18000 behind the gate (training/rayfleet/serve/config.py GATED_PROXY_PORT)
    condition     = var.serve.port != 18000
    error_message = "serve.port 18000 is where Serve's own proxy listens behind the key check (serve-gate): pick another."
  }

  validation {
    condition     = var.serve.tls_secret_arn == null || can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$", var.serve.tls_secret_arn))
    error_message = "serve.tls_secret_arn must be a Secrets Manager secret ARN (its JSON: {\"cert\": PEM, \"key\": PEM})."
  }

  validation {
    condition     = !var.serve.enabled || length(var.serve.allowed_cidrs) + length(var.serve.allowed_security_group_ids) > 0
    error_message = "serve.enabled needs serve.allowed_cidrs or serve.allowed_security_group_ids: who may call the endpoint."
  }

  validation {
    condition     = alltrue([for c in var.serve.allowed_cidrs : can(cidrhost(c, 0)) && tonumber(split("/", c)[1]) >= (strcontains(c, ":") ? 32 : 8)])
    error_message = "serve.allowed_cidrs must be CIDR blocks of at least /8 (IPv6: /32): the endpoint is never open to the internet at large (0.0.0.0/1 is half of it)."
  }
}

variable "image_tag" {
  description = "Tag of the four images in ECR (make push tags with the git commit; make deploy passes it)."
  type        = string

  validation {
    condition     = length(var.image_tag) > 0 && var.image_tag != "latest"
    error_message = "image_tag must name one build (the repositories are immutable): not empty, not latest."
  }
}

variable "object_store_fraction" {
  description = "Share of each Ray container's memory for Ray's object store (and /dev/shm)."
  type        = number
  default     = 0.3
}

variable "results_force_destroy" {
  description = "Let a bare terraform destroy delete the results bucket with its objects (make clean empties it only with DELETE_RESULTS=1)."
  type        = bool
  default     = false
}

variable "log_retention_days" {
  description = "Days to keep container, ECS Exec and flow logs."
  type        = number
  default     = 30
}

variable "idle_alarm_minutes" {
  description = "Minutes of GPUs under 5% while workers run before the idle alarm fires (multiple of 5)."
  type        = number
  default     = 30
}

variable "notify_emails" {
  description = "E-mail addresses subscribed to the notifications topic: the idle-GPU alarm and runs' start, end, failure and stalls."
  type        = list(string)
  default     = []
}

variable "alarm_actions" {
  description = "ARNs notified by the idle-GPU alarm besides the notifications topic."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Extra tags on every resource."
  type        = map(string)
  default     = {}
}

variable "create_autoscaling_service_linked_role" {
  description = "Create Auto Scaling's service-linked role (the KMS key policy names it) in an account that has none, for plain-Terraform pipelines; make deploy creates a missing one itself and leaves this false."
  type        = bool
  default     = false
}

variable "s3_read_buckets" {
  description = "Buckets besides the deployment's that jobs may read (S3 gateway endpoint policy): e.g. public datasets in the region. Nothing else is reachable over S3 from the private subnets."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for b in var.s3_read_buckets : can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", b))])
    error_message = "s3_read_buckets holds bucket names (not ARNs or s3:// URLs)."
  }
}

variable "queue_budget" {
  description = "The run queue's budget: \"500/month\" (a calendar month, UTC) or \"2000/total\", in US dollars; empty: none. A run whose projected cost (its max_cost_usd, or max_hours at its hourly price) would pass what is left waits, held, and a run that costs money must then set one of them."
  type        = string
  default     = ""
}

variable "queue_max_priority" {
  description = "The highest run priority the queue obeys (0-9, the recipe schema's range): a higher one in a queue entry, which any job can write, is clamped to it by the control task and every admission (training/rayfleet/core/run_queue_checks.py). An operator's setting, never a recipe's."
  type        = number
  default     = 9

  validation {
    condition     = var.queue_max_priority >= 0 && var.queue_max_priority <= 9 && floor(var.queue_max_priority) == var.queue_max_priority
    error_message = "queue_max_priority: a whole number from 0 to 9."
  }
}

variable "gcs_store" {
  description = "Keep the Ray head's GCS in a Valkey store (ElastiCache, private, TLS, encrypted at rest, its token set by `make deploy`), so that a replaced head takes back the running jobs, actors and Serve applications: `{ enabled = true }`. Off by default: the store bills every hour, also while autostop has scaled everything else to zero (docs/DESIGN.md, \"A lost head\")."
  type = object({
    enabled   = optional(bool, false)
    node_type = optional(string, "cache.t4g.micro")
    replicas  = optional(number, 0)
    # Daily snapshots kept (1-35), and a snapshot to start a new store from (docs/operations.md)
    snapshot_retention_days = optional(number, 7)
    restore_snapshot        = optional(string)
  })
  default  = {}
  nullable = false
}
