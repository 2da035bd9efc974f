provider "aws" {
  region = var.region

  default_tags {
    tags = merge(var.tags, { Project = "rayfleet", Deployment = var.name })
  }
}
