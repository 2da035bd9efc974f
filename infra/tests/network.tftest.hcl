# The network module's security-group rules, subnets and endpoints as Terraform renders them (mocked
# providers): Ray's ports are reachable only from the Ray group itself, nothing is reachable from a CIDR,
# the instances accept nothing, and the world is reached on 443 only.

mock_provider "aws" {
  source = "./tests"
}

variables {
  name        = "rayfleet"
  kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  ray_ports   = jsondecode(file("catalog/ray_ports.json"))
  bucket_arn  = "arn:aws:s3:::rayfleet-results-20250601"
}

run "two_zones_with_endpoints" {
  command = apply

  module {
    source = "./modules/network"
  }

  variables {
    az_count            = 2
    interface_endpoints = true
  }

  override_resource {
    target = aws_security_group.tasks
    values = { id = "sg-0000000000000ray0" }
  }

  override_resource {
    target = aws_security_group.instances
    values = { id = "sg-00000000instances" }
  }

  override_resource {
    target = aws_security_group.endpoints
    values = { id = "sg-00000000endpoints" }
  }

  assert {
    condition     = toset(keys(aws_vpc_security_group_ingress_rule.ray)) == toset(keys(var.ray_ports)) && toset(keys(aws_vpc_security_group_egress_rule.ray)) == toset(keys(var.ray_ports))
    error_message = "One ingress and one egress rule per Ray port range of infra/catalog/ray_ports.json."
  }

  assert {
    condition = alltrue([
      for k, r in merge(aws_vpc_security_group_ingress_rule.ray, aws_vpc_security_group_egress_rule.ray) :
      r.security_group_id == "sg-0000000000000ray0" && r.referenced_security_group_id == "sg-0000000000000ray0" &&
      r.cidr_ipv4 == null && r.cidr_ipv6 == null && r.prefix_list_id == null && r.ip_protocol == "tcp" &&
      r.from_port == var.ray_ports[k].from && r.to_port == var.ray_ports[k].to
    ])
    error_message = "Ray's ports are open only between members of the Ray group, on exactly the ports Ray is started with."
  }

  assert {
    condition = alltrue([
      for r in concat(values(aws_vpc_security_group_ingress_rule.ray), values(aws_vpc_security_group_ingress_rule.endpoints)) :
      r.cidr_ipv4 == null && r.cidr_ipv6 == null && r.prefix_list_id == null && r.referenced_security_group_id != null
    ])
    error_message = "No ingress from any CIDR or prefix list: every ingress rule names a security group."
  }

  assert {
    condition = (
      length([for r in concat(values(aws_vpc_security_group_ingress_rule.ray), values(aws_vpc_security_group_ingress_rule.endpoints)) : r if r.security_group_id == "sg-0000000000000ray0"]) == length(var.ray_ports) &&
      length([for r in concat(values(aws_vpc_security_group_ingress_rule.ray), values(aws_vpc_security_group_ingress_rule.endpoints)) : r if r.security_group_id == "sg-00000000instances"]) == 0
    )
    error_message = "Into the Ray group only its own Ray ports; into the instances nothing at all."
  }

  assert {
    condition = alltrue([
      for r in [aws_vpc_security_group_egress_rule.tasks_https, aws_vpc_security_group_egress_rule.instances_https] :
      r.cidr_ipv4 == "0.0.0.0/0" && r.ip_protocol == "tcp" && r.from_port == 443 && r.to_port == 443
    ])
    error_message = "Egress to the world is HTTPS only."
  }

  assert {
    condition = (
      aws_vpc_security_group_egress_rule.tasks_https.security_group_id == "sg-0000000000000ray0" &&
      aws_vpc_security_group_egress_rule.instances_https.security_group_id == "sg-00000000instances"
    )
    error_message = "Each group has its own HTTPS egress."
  }

  assert {
    condition = alltrue([
      for r in concat(values(aws_vpc_security_group_egress_rule.ray), [aws_vpc_security_group_egress_rule.tasks_https, aws_vpc_security_group_egress_rule.instances_https], values(aws_vpc_security_group_ingress_rule.ray), values(aws_vpc_security_group_ingress_rule.endpoints)) :
      r.ip_protocol != "-1"
    ])
    error_message = "No rule opens every protocol."
  }

  assert {
    condition = {
      for k, r in aws_vpc_security_group_ingress_rule.endpoints : k => [r.security_group_id, r.referenced_security_group_id, r.from_port, r.to_port]
      } == {
      tasks     = ["sg-00000000endpoints", "sg-0000000000000ray0", 443, 443]
      instances = ["sg-00000000endpoints", "sg-00000000instances", 443, 443]
    }
    error_message = "The interface endpoints accept HTTPS from the cluster's tasks and instances only."
  }

  assert {
    condition = (
      toset(keys(aws_vpc_endpoint.interface)) == toset(["ecr.api", "ecr.dkr", "logs", "secretsmanager", "ssmmessages", "monitoring"]) &&
      aws_vpc_endpoint.interface["ecr.dkr"].service_name == "com.amazonaws.us-east-1.ecr.dkr" &&
      aws_vpc_endpoint.interface["ecr.dkr"].private_dns_enabled &&
      aws_vpc_endpoint.interface["ecr.dkr"].security_group_ids == toset(["sg-00000000endpoints"]) &&
      aws_vpc_endpoint.s3.service_name == "com.amazonaws.us-east-1.s3" && aws_vpc_endpoint.s3.vpc_endpoint_type == "Gateway"
    )
    error_message = "Interface endpoints for the image pulls, logs, token, ECS Exec and metrics; S3 through a gateway."
  }

  # issue 27 item 9: nothing in the private subnets writes to another account's bucket through the endpoint.
  assert {
    condition = jsonencode({ for s in jsondecode(aws_vpc_endpoint.s3.policy).Statement : s.Sid => [s.Action, s.Resource] }) == jsonencode({
      DeploymentBucket = ["s3:*", ["arn:aws:s3:::rayfleet-results-20250601", "arn:aws:s3:::rayfleet-results-20250601/*"]]
      EcrImageLayers   = ["s3:GetObject", "arn:aws:s3:::prod-us-east-1-starport-layer-bucket/*"]
    })
    error_message = "S3 gateway endpoint policy: ${aws_vpc_endpoint.s3.policy}"
  }

  assert {
    condition = (
      [for s in aws_subnet.private : [s.cidr_block, s.availability_zone, s.map_public_ip_on_launch]] == [["10.42.0.0/20", "us-east-1a", false], ["10.42.16.0/20", "us-east-1b", false]] &&
      [for s in aws_subnet.public : [s.cidr_block, s.availability_zone]] == [["10.42.240.0/24", "us-east-1a"], ["10.42.241.0/24", "us-east-1b"]] &&
      output.availability_zones == tolist(["us-east-1a", "us-east-1b"])
    )
    error_message = "A /20 private and a /24 public subnet in each of the first two zones."
  }

  assert {
    condition     = length(aws_nat_gateway.this) == 2 && length(aws_route.private_nat) == 2 && aws_route.public_internet.destination_cidr_block == "0.0.0.0/0"
    error_message = "One NAT gateway per zone, each zone's private route through its own."
  }

  assert {
    condition = (
      aws_flow_log.this.traffic_type == "REJECT" &&
      jsondecode(aws_iam_role_policy.flow_logs.policy).Statement[0].Resource == "${aws_cloudwatch_log_group.flow_logs.arn}:*" &&
      jsondecode(aws_iam_role.flow_logs.assume_role_policy).Statement[0].Principal == { Service = "vpc-flow-logs.amazonaws.com" }
    )
    error_message = "Rejected flows are logged, by a role that may write only to the flow-log group."
  }
}

run "one_pinned_zone" {
  command = apply

  module {
    source = "./modules/network"
  }

  variables {
    availability_zones = ["us-east-1c"]
  }

  assert {
    condition     = [for s in aws_subnet.private : s.availability_zone] == ["us-east-1c"] && length(aws_vpc_endpoint.interface) == 0
    error_message = "availability_zones pins the zone; no interface endpoints unless asked."
  }

  assert {
    condition     = length(aws_security_group.efa) == 0 && length(aws_vpc_security_group_ingress_rule.efa) == 0 && length(aws_vpc_security_group_egress_rule.efa) == 0 && output.efa_security_group_id == null
    error_message = "Without EFA there is no EFA group and no all-traffic rule."
  }
}

# issue 15 item 9: EFA's OS-bypass traffic is neither TCP nor UDP, so AWS requires the EFA interfaces' group to
# allow all traffic to and from itself. That group exists only for the EFA shape, holds only the EFA
# interfaces (infra/modules/cluster), and its two all-traffic rules name only the group itself.
run "efa_group" {
  command = apply

  module {
    source = "./modules/network"
  }

  variables {
    efa = true
  }

  override_resource {
    target = aws_security_group.efa
    values = { id = "sg-00000000000000efa" }
  }

  assert {
    condition = (
      length(aws_vpc_security_group_ingress_rule.efa) == 1 && length(aws_vpc_security_group_egress_rule.efa) == 1 &&
      alltrue([
        for r in concat(aws_vpc_security_group_ingress_rule.efa, aws_vpc_security_group_egress_rule.efa) :
        r.security_group_id == "sg-00000000000000efa" && r.referenced_security_group_id == "sg-00000000000000efa" &&
        r.ip_protocol == "-1" && r.cidr_ipv4 == null && r.cidr_ipv6 == null && r.prefix_list_id == null
      ])
    )
    error_message = "The EFA group: every protocol, to and from itself only."
  }

  assert {
    condition     = output.efa_security_group_id == "sg-00000000000000efa" && aws_security_group.efa[0].vpc_id == aws_vpc.this.id
    error_message = "The EFA group is an output, in the deployment's VPC."
  }
}
