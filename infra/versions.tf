terraform {
  required_version = ">= 1.5"

  required_providers {
    # Exact versions (issue 27): what the stand-ins are built from and tested against. The checksums belong
    # in .terraform.lock.hcl, which `make deploy`'s first `terraform init` against the registry writes; it
    # cannot be made here (no registry), so commit the one your first deploy writes.
    aws = {
      source  = "hashicorp/aws"
      version = "5.100.0"
    }
    random = {
      source  = "hashicorp/random"
      version = "3.7.2"
    }
  }
}
