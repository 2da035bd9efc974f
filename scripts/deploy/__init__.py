"""Build and deploy (run on the laptop or in CI): the images (docker/podman, ECR) and Terraform."""
