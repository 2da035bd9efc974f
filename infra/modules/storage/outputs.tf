output "bucket_name" {
  description = "Name of the results bucket."
  value       = aws_s3_bucket.results.id
}

output "bucket_arn" {
  description = "ARN of the results bucket."
  value       = aws_s3_bucket.results.arn
}

output "prefixes" {
  description = "Prefixes the Ray tasks (and so every job) may use: runs/ (one per run), data/ (datasets), queue/ (the run queue)."
  value       = ["runs/", "data/", local.queue_prefix]
}

output "read_only_prefixes" {
  description = "Prefixes the Ray tasks may list and read but not write: staged/ (a recipe's data:, which the deployer stages by content hash; a job that could write there could plant content another run trusts)."
  value       = ["staged/"]
}

output "queue_prefix" {
  description = "The run queue's prefix (one of prefixes): the control task reads it to scale the workers."
  value       = local.queue_prefix
}

output "control_prefix" {
  description = "The prefix no job writes (the control task and the deployer do): cluster/ (the head's snapshot, which make start and make status trust; the Serve config make serve keeps, which the control task applies)."
  value       = "cluster/"
}
