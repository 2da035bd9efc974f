# The FSDP blueprint's shape: 2 x g5.12xlarge (4 x A10G each, 8 GPUs in all) for dolly-v2-7b.
#   make deploy TFVARS=fsdp.tfvars
workers = {
  instance_type   = "g5.12xlarge"
  count           = 2
  root_volume_gb  = 300 # the 7B checkpoint and its sharded optimizer state
  efa             = true
  placement_group = true
}
