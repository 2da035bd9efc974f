# The single worker group of earlier versions is the worker group named "default": its launch template, Auto
# Scaling group, capacity provider and placement group keep their node group key ("worker", main.tf), and its
# task definition and service move into the per-group maps here, so `worker_groups = { default = {...} }` (the
# entry the old `workers` variable's refusal prints) plans no replacement of the workers.
moved {
  from = module.ray.aws_ecs_service.worker
  to   = module.ray.aws_ecs_service.worker["default"]
}

moved {
  from = module.ray.aws_ecs_task_definition.worker
  to   = module.ray.aws_ecs_task_definition.worker["default"]
}
