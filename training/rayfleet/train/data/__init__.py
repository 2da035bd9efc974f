"""Datasets: FashionMNIST (real via torchvision, or generated in the same IDX format) and device-side batching."""
