output "address" {
  description = "The store's primary endpoint (TLS only)."
  value       = aws_elasticache_replication_group.store.primary_endpoint_address
}

output "port" {
  description = "The store's port."
  value       = var.port
}

output "replication_group_id" {
  description = "What `make deploy` sets the AUTH token on."
  value       = aws_elasticache_replication_group.store.id
}

output "client_security_group_id" {
  description = "The group the head service joins: the only one the store admits."
  value       = aws_security_group.client.id
}
