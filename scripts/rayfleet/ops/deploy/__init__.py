"""The deployment's lifecycle on the operator's machine: Terraform's plan, check, deploy and down, and what they
guard."""
