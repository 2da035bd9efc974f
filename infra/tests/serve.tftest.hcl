# Ray Serve (make serve) as Terraform renders it (mocked providers): the Serve port opens on the head only,
# only from the listed CIDRs and security groups; the API key is a KMS-encrypted secret that reaches the
# workers (where the replicas run) through `secrets`; with serving off nothing of it exists.

mock_provider "aws" {
  source = "./tests"
}

mock_provider "random" {}

variables {
  model_cache     = { pointer_key = "staged/models.json", host_dir = "/opt/rayfleet/cache" } # as infra/main.tf
  model_cache_dir = "/opt/rayfleet/cache"
  bucket_arn      = "arn:aws:s3:::rayfleet-results-0123456789" # the network module's S3 endpoint policy
  image_tag       = "0123456789ab"
  catalog         = jsondecode(file("../training/rayfleet/core/instance_types.json")).instance_types
  name            = "rayfleet"
  ray_ports       = jsondecode(file("catalog/ray_ports.json"))
  # the ray module's other inputs, as default.tftest.hcl gives them
  region                = "us-east-1"
  vpc_id                = "vpc-0123456789abcdef0"
  cluster_arn           = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"
  capacity_providers    = { head = "rayfleet-head", worker = "rayfleet-worker", "worker-ddp" = "rayfleet-worker-ddp", "worker-fsdp" = "rayfleet-worker-fsdp" }
  subnet_ids            = ["subnet-0123456789abcdef0"]
  security_group_id     = "sg-0000000000000ray0"
  images                = { "ray-head" = "h:1", "ray-worker" = "w:1", "trainer" = "t:1", "gpu-metrics" = "g:1" }
  execution_role_arn    = "arn:aws:iam::123456789012:role/rayfleet-task-execution"
  task_role_arn         = "arn:aws:iam::123456789012:role/rayfleet-task"
  control_task_role_arn = "arn:aws:iam::123456789012:role/rayfleet-control-task"
  kms_key_arn           = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  results_bucket        = "rayfleet-results-0123456789"
}

run "serve_network" {
  command = apply

  module {
    source = "./modules/network"
  }

  variables {
    serve = { port = 8000, allowed_cidrs = ["10.20.0.0/16", "192.168.7.0/24"], allowed_security_group_ids = ["sg-0000000000client"] }
  }

  override_resource {
    target = aws_security_group.tasks
    values = { id = "sg-0000000000000ray0" }
  }

  override_resource {
    target = aws_security_group.serve
    values = { id = "sg-000000000000serve" }
  }

  assert {
    condition = alltrue([
      for r in concat(values(aws_vpc_security_group_ingress_rule.serve_cidr), values(aws_vpc_security_group_ingress_rule.serve_group)) :
      r.security_group_id == "sg-000000000000serve" && r.ip_protocol == "tcp" && r.from_port == 8000 && r.to_port == 8000
    ])
    error_message = "Every Serve rule opens the Serve port alone, TCP, into the Serve group."
  }

  assert {
    condition = (
      toset([for r in aws_vpc_security_group_ingress_rule.serve_cidr : r.cidr_ipv4]) == toset(["10.20.0.0/16", "192.168.7.0/24"]) &&
      toset([for r in aws_vpc_security_group_ingress_rule.serve_group : r.referenced_security_group_id]) == toset(["sg-0000000000client"]) &&
      alltrue([for r in aws_vpc_security_group_ingress_rule.serve_group : r.cidr_ipv4 == null])
    )
    error_message = "The Serve port opens to exactly the listed CIDRs and security groups."
  }

  assert {
    condition     = length([for r in values(aws_vpc_security_group_ingress_rule.ray) : r if r.from_port <= 8000 && r.to_port >= 8000]) == 0 && length(aws_vpc_security_group_ingress_rule.ray) == length(var.ray_ports)
    error_message = "Serving adds nothing to the Ray group: its rules are Ray's ports, none of them the Serve port."
  }

  assert {
    condition     = output.serve_security_group_id == "sg-000000000000serve" && aws_security_group.serve[0].vpc_id == aws_vpc.this.id
    error_message = "The Serve group is in the cluster's VPC and is the module's output."
  }
}

run "serving_off_network" {
  command = apply

  module {
    source = "./modules/network"
  }

  assert {
    condition     = length(aws_security_group.serve) == 0 && length(aws_vpc_security_group_ingress_rule.serve_cidr) + length(aws_vpc_security_group_ingress_rule.serve_group) == 0 && output.serve_security_group_id == null
    error_message = "With serving off there is no Serve group and no Serve rule."
  }
}

run "serve_ray" {
  command = apply

  module {
    source = "./modules/ray"
  }

  variables {
    head_node = { vcpus = var.catalog["m5.xlarge"].vcpus, memory_mib = var.catalog["m5.xlarge"].memory_mib, gpus = var.catalog["m5.xlarge"].gpus }
    worker_groups = {
      ddp = {
        node_group    = "worker-ddp"
        instance_type = "g5.xlarge"
        vcpus         = var.catalog["g5.xlarge"].vcpus
        memory_mib    = var.catalog["g5.xlarge"].memory_mib
        gpus          = var.catalog["g5.xlarge"].gpus
        min           = 0
        max           = 2
        efa           = false
      }
      fsdp = {
        node_group    = "worker-fsdp"
        instance_type = "g5.12xlarge"
        vcpus         = var.catalog["g5.12xlarge"].vcpus
        memory_mib    = var.catalog["g5.12xlarge"].memory_mib
        gpus          = var.catalog["g5.12xlarge"].gpus
        min           = 0
        max           = 2
        efa           = true
        efa_devices   = 1
      }
    }
    serve = { port = 8000, security_group_id = "sg-000000000000serve" }
  }

  override_resource {
    target = aws_secretsmanager_secret.serve_api_key
    values = { arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/serve-api-key-20261124-AbCdEf" }
  }

  assert {
    condition     = one(aws_ecs_service.head.network_configuration).security_groups == toset(["sg-0000000000000ray0", "sg-000000000000serve"])
    error_message = "The head service alone carries the Serve group, beside the Ray group."
  }

  assert {
    condition = (
      one(aws_ecs_service.worker["ddp"].network_configuration).security_groups == toset(["sg-0000000000000ray0"]) &&
      length(aws_ecs_service.worker["fsdp"].network_configuration) == 0
    )
    error_message = "The workers do not carry the Serve group (fsdp's, on EFA, run in host networking: no group of their own)."
  }

  # issue 27 item 8: one process checks the key in front of every route on the Serve port: the head task's
  # serve-gate container, which alone holds the key; it starts before the head (no job can take its port).
  assert {
    condition = (
      [for c in jsondecode(aws_ecs_task_definition.head.container_definitions) : c.name] == ["ray-head", "serve-gate"] &&
      jsondecode(aws_ecs_task_definition.head.container_definitions)[0].dependsOn == [{ containerName = "serve-gate", condition = "START" }] &&
      jsondecode(aws_ecs_task_definition.head.container_definitions)[1].entryPoint == ["python", "-m", "rayfleet.node.serve.gate"] &&
      jsondecode(aws_ecs_task_definition.head.container_definitions)[1].command == ["--host", "0.0.0.0", "--port", "8000"] &&
      jsondecode(aws_ecs_task_definition.head.container_definitions)[1].secrets == [{ name = "RAYFLEET_SERVE_API_KEY", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/serve-api-key-20261124-AbCdEf" }] &&
      !strcontains(jsonencode(jsondecode(aws_ecs_task_definition.head.container_definitions)[0]), "RAYFLEET_SERVE_API_KEY") &&
      !anytrue([for w in aws_ecs_task_definition.worker : strcontains(w.container_definitions, "RAYFLEET_SERVE_API_KEY")]) &&
      !strcontains(aws_ecs_task_definition.trainer.container_definitions, "RAYFLEET_SERVE_API_KEY")
    )
    error_message = "The API key reaches the serve-gate container alone, which starts before the head: ${aws_ecs_task_definition.head.container_definitions}"
  }

  # issue 54 R11: a gate restarted in place would leave the Serve port free for a job on the head to bind;
  # essential and without a restart policy, a gate that exits takes the head task (and its jobs) with it.
  assert {
    condition = (
      jsondecode(aws_ecs_task_definition.head.container_definitions)[1].essential == true &&
      try(jsondecode(aws_ecs_task_definition.head.container_definitions)[1].restartPolicy.enabled, false) == false
    )
    error_message = "The serve gate is essential and never restarted in place: ${aws_ecs_task_definition.head.container_definitions}"
  }

  assert {
    condition = (
      aws_secretsmanager_secret.serve_api_key[0].kms_key_id == var.kms_key_arn &&
      startswith(aws_secretsmanager_secret.serve_api_key[0].name_prefix, "rayfleet/serve-api-key-")
    )
    error_message = "The key's secret is encrypted with the deployment's key and named as the execution role's policy expects."
  }

  assert {
    condition     = output.serve_endpoint == "http://head.rayfleet.rayfleet.internal:8000" && output.serve_api_key_secret_arn == "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/serve-api-key-20261124-AbCdEf"
    error_message = "The endpoint is the head's private name on the Serve port, got ${output.serve_endpoint}."
  }
}

run "serving_off_ray" {
  command = apply

  module {
    source = "./modules/ray"
  }

  variables {
    head_node     = { vcpus = 4, memory_mib = 16384, gpus = 0 }
    worker_groups = { default = { node_group = "worker", instance_type = "g5.xlarge", vcpus = 4, memory_mib = 16384, gpus = 1, min = 1, max = 1, efa = false } }
  }

  assert {
    condition     = length(aws_secretsmanager_secret.serve_api_key) == 0 && output.serve_endpoint == "" && !strcontains(aws_ecs_task_definition.worker["default"].container_definitions, "RAYFLEET_SERVE_API_KEY") && length(jsondecode(aws_ecs_task_definition.head.container_definitions)) == 1
    error_message = "With serving off there is no key, no endpoint, no gate and no key in any container."
  }
}

run "serve_ray_with_tls" {
  command = apply

  module {
    source = "./modules/ray"
  }

  variables {
    head_node     = { vcpus = 4, memory_mib = 16384, gpus = 0 }
    worker_groups = { default = { node_group = "worker", instance_type = "g5.xlarge", vcpus = 4, memory_mib = 16384, gpus = 1, min = 1, max = 1, efa = false } }
    serve         = { port = 8443, security_group_id = "sg-000000000000serve", tls_secret_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:acme/serve-tls-AbCdEf" }
  }

  assert {
    condition = (
      output.serve_endpoint == "https://head.rayfleet.rayfleet.internal:8443" &&
      contains(jsondecode(aws_ecs_task_definition.head.container_definitions)[1].secrets, { name = "RAYFLEET_SERVE_TLS_CERT", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:acme/serve-tls-AbCdEf:cert::" }) &&
      contains(jsondecode(aws_ecs_task_definition.head.container_definitions)[1].secrets, { name = "RAYFLEET_SERVE_TLS_KEY", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:acme/serve-tls-AbCdEf:key::" })
    )
    error_message = "With a certificate the gate gets its two PEMs from the secret's JSON keys and the endpoint is https."
  }
}
