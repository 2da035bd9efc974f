output "bucket_name" {
  description = "Name of the results bucket."
  value       = aws_s3_bucket.results.id
}

output "bucket_arn" {
  description = "ARN of the results bucket."
  value       = aws_s3_bucket.results.arn
}

output "prefixes" {
  description = "Prefixes the Ray tasks may use: runs/ (one per run), cluster/ (head snapshot), data/ (datasets)."
  value       = ["runs/", "cluster/", "data/"]
}
