# One worker group named default, 2 x g5.xlarge kept running: the layout of a deployment made before worker
# groups (its resources keep their names, infra/moved.tf), and what the test harness's moto and podman
# stand-ins deploy (tools/moto_stack, tools/rehearsal).
#   make deploy TFVARS=one-group.tfvars
head_instance_type = "m5.xlarge" # and one run's driver at a time, as before worker groups
concurrent_runs    = 1
worker_groups = {
  default = { instance_types = ["g5.xlarge"], min = 2, max = 2 }
}
