output "vpc_id" {
  description = "ID of the VPC."
  value       = aws_vpc.this.id
}

output "private_subnet_ids" {
  description = "Private subnets, one per zone, where every instance and task runs."
  value       = aws_subnet.private[*].id
}

output "task_security_group_id" {
  description = "Security group of every Ray task (head, workers, trainer)."
  value       = aws_security_group.tasks.id
}

output "instance_security_group_id" {
  description = "Security group of the container instances."
  value       = aws_security_group.instances.id
}

output "availability_zones" {
  description = "Zones the subnets are in."
  value       = local.azs
}

output "efa_security_group_id" {
  description = "The EFA group (all traffic among the EFA interfaces), or null without EFA."
  value       = one(aws_security_group.efa[*].id)
}

output "serve_security_group_id" {
  description = "The Serve group (the Serve port from the listed sources), or null with serving off."
  value       = one(aws_security_group.serve[*].id)
}
