# Ray Serve (make serve): the API key every request carries. Like the Ray token, Terraform makes the secret and
# never its value (`make deploy` seeds it: scripts/rayfleet/ecs/rotate_token.py `seed_token`); ECS hands it to the
# serve-gate container alone (task_definitions.tf), the one process that listens on the Serve port and checks
# it for every route; no job process has it. Callers read it with GetSecretValue as far as their IAM policies
# allow; the execution role may read it (iam module).
resource "aws_secretsmanager_secret" "serve_api_key" {
  # checkov:skip=CKV2_AWS_57: a new key must reach the workers (restart) and every caller; rotate by hand with make deploy after deleting the version
  count                   = var.serve == null ? 0 : 1
  name_prefix             = "${var.name}/serve-api-key-"
  description             = "API key of ${var.name}'s Ray Serve endpoint (Authorization: Bearer <key>)"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
  tags                    = merge(var.tags, { Component = "serve" })
}

locals {
  # Serve's own proxy listens on 127.0.0.1 here (training/rayfleet/serve/config.py GATED_PROXY_PORT); only the gate
  # reaches it, from inside the head task's network namespace.
  serve_gate_container = var.serve == null ? null : merge(local.locked_down, {
    name  = "serve-gate"
    image = var.images["ray-head"]
    # Essential, with no restart policy: while a gate restarted in place, the Serve port would be free in the
    # head task's network namespace, where any job can bind it and collect callers' keys. A gate that exits
    # stops the whole head task instead (with a GCS store a replaced head takes the cluster back).
    essential   = true
    entryPoint  = ["python", "-m", "rayfleet.node.serve.gate"]
    command     = ["--host", "0.0.0.0", "--port", tostring(var.serve.port)]
    memory      = local.sidecar_memory_mib
    user        = local.ray_user
    mountPoints = local.scratch_mounts # TLS PEMs are written to /tmp (0700) for the moment they load
    secrets = concat(
      [for s in aws_secretsmanager_secret.serve_api_key : { name = "RAYFLEET_SERVE_API_KEY", valueFrom = s.arn }],
      var.serve.tls_secret_arn == null ? [] : [
        { name = "RAYFLEET_SERVE_TLS_CERT", valueFrom = "${var.serve.tls_secret_arn}:cert::" },
        { name = "RAYFLEET_SERVE_TLS_KEY", valueFrom = "${var.serve.tls_secret_arn}:key::" },
      ],
    )
    linuxParameters  = merge(local.no_capabilities, { initProcessEnabled = true })
    logConfiguration = local.logging["ray-head"] # stream ray-head/serve-gate/<task id>
    stopTimeout      = 10
  })
}
