"""The ECS verbs (run on the laptop): launch, logs, status, exec, stop, token rotation, over the one AWS
adapter (rayfleet.core.aws) and the Terraform outputs file."""
