# Ray has no per-port authentication beyond its token, so its ports are only reachable from members of
# this group (head, workers, trainer): never from the VPC CIDR, never from 0.0.0.0/0.
resource "aws_security_group" "tasks" {
  # checkov:skip=CKV2_AWS_5: attached in other modules (cluster launch templates, ray services), which this check cannot follow
  name_prefix = "${var.name}-ray-"
  description = "Ray head, workers and trainer of ${var.name}; Ray ports open only to this group"
  vpc_id      = aws_vpc.this.id
  tags        = merge(local.tags, { Name = "${var.name}-ray" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "ray" {
  for_each                     = var.ray_ports
  security_group_id            = aws_security_group.tasks.id
  referenced_security_group_id = aws_security_group.tasks.id
  ip_protocol                  = "tcp"
  from_port                    = each.value.from
  to_port                      = each.value.to
  description                  = "Ray ${each.key} from the cluster itself"
  tags                         = local.tags
}

resource "aws_vpc_security_group_egress_rule" "ray" {
  for_each                     = var.ray_ports
  security_group_id            = aws_security_group.tasks.id
  referenced_security_group_id = aws_security_group.tasks.id
  ip_protocol                  = "tcp"
  from_port                    = each.value.from
  to_port                      = each.value.to
  description                  = "Ray ${each.key} to the cluster itself"
  tags                         = local.tags
}

# HTTPS out: S3 (through the gateway endpoint), CloudWatch, ECS Exec, Secrets Manager, and model hubs.
resource "aws_vpc_security_group_egress_rule" "tasks_https" {
  security_group_id = aws_security_group.tasks.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  description       = "HTTPS to AWS APIs and S3"
  tags              = local.tags
}

# The container instances accept no inbound traffic at all; the ECS agent, image pulls and SSM go out on 443.
resource "aws_security_group" "instances" {
  # checkov:skip=CKV2_AWS_5: attached in other modules (cluster launch templates, ray services), which this check cannot follow
  name_prefix = "${var.name}-instances-"
  description = "ECS container instances of ${var.name}: no ingress, HTTPS egress only"
  vpc_id      = aws_vpc.this.id
  tags        = merge(local.tags, { Name = "${var.name}-instances" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_egress_rule" "instances_https" {
  security_group_id = aws_security_group.instances.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  description       = "HTTPS to the ECS, ECR and SSM APIs"
  tags              = local.tags
}

resource "aws_security_group" "endpoints" {
  name_prefix = "${var.name}-endpoints-"
  description = "Interface endpoints of ${var.name}: HTTPS from the cluster's tasks and instances only"
  vpc_id      = aws_vpc.this.id
  tags        = merge(local.tags, { Name = "${var.name}-endpoints" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "endpoints" {
  for_each = {
    tasks     = aws_security_group.tasks.id
    instances = aws_security_group.instances.id
  }
  security_group_id            = aws_security_group.endpoints.id
  referenced_security_group_id = each.value
  ip_protocol                  = "tcp"
  from_port                    = 443
  to_port                      = 443
  description                  = "HTTPS from the cluster's ${each.key}"
  tags                         = local.tags
}

# EFA's OS-bypass traffic (SRD) is neither TCP nor UDP: AWS requires the group of EFA interfaces to allow all
# traffic from and to itself. The one all-traffic pair of rules in rayfleet, only in the EFA shape, only on
# this group, which only the workers' EFA interfaces carry (tests/infra/test_security_groups.py names it).
resource "aws_security_group" "efa" {
  # checkov:skip=CKV2_AWS_5: attached in the cluster module (the workers' EFA interfaces), which this check cannot follow
  count       = var.efa ? 1 : 0
  name_prefix = "${var.name}-efa-"
  description = "EFA interfaces of ${var.name}'s workers: all traffic, only among themselves (EFA requirement)"
  vpc_id      = aws_vpc.this.id
  tags        = merge(local.tags, { Name = "${var.name}-efa" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "efa" {
  count                        = var.efa ? 1 : 0
  security_group_id            = aws_security_group.efa[0].id
  referenced_security_group_id = aws_security_group.efa[0].id
  ip_protocol                  = "-1"
  description                  = "EFA: all traffic from the EFA group itself (AWS requirement for EFA)"
  tags                         = local.tags
}

resource "aws_vpc_security_group_egress_rule" "efa" {
  count                        = var.efa ? 1 : 0
  security_group_id            = aws_security_group.efa[0].id
  referenced_security_group_id = aws_security_group.efa[0].id
  ip_protocol                  = "-1"
  description                  = "EFA: all traffic to the EFA group itself (AWS requirement for EFA)"
  tags                         = local.tags
}

# Ray Serve's HTTP proxy on the head (make serve): one port, only from the sources the deployment lists. The
# group is attached to the head service alone, so no other task and no other port opens; every request also
# needs the API key (training/rayfleet/serve/keys.py).
resource "aws_security_group" "serve" {
  # checkov:skip=CKV2_AWS_5: attached to the head service in the ray module, which this check cannot follow
  count       = var.serve == null ? 0 : 1
  name_prefix = "${var.name}-serve-"
  description = "Ray Serve on the head of ${var.name}: the Serve port only, from the listed sources only"
  vpc_id      = aws_vpc.this.id
  tags        = merge(local.tags, { Name = "${var.name}-serve" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "serve_cidr" {
  for_each          = var.serve == null ? toset([]) : toset(var.serve.allowed_cidrs)
  security_group_id = aws_security_group.serve[0].id
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = var.serve.port
  to_port           = var.serve.port
  description       = "Ray Serve from ${each.value}"
}

resource "aws_vpc_security_group_ingress_rule" "serve_group" {
  for_each                     = var.serve == null ? toset([]) : toset(var.serve.allowed_security_group_ids)
  security_group_id            = aws_security_group.serve[0].id
  referenced_security_group_id = each.value
  ip_protocol                  = "tcp"
  from_port                    = var.serve.port
  to_port                      = var.serve.port
  description                  = "Ray Serve from ${each.value}"
}
