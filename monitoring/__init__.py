"""The GPU-metrics sidecar: NVML samples, aggregated into CloudWatch statistic sets, published in batches."""
