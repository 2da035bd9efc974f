# Memory per task, in MiB. ECS registers a little less than an instance's nominal memory, and the OS and
# agent need some, so tasks take 90%. Ray's object store lives in /dev/shm, and tmpfs pages count against
# the container's memory limit: shared memory = object store + 1 GiB (DataLoader workers, NCCL's shm
# transport), and it must leave at least 2 GiB of the limit to the processes themselves (preconditions in
# main.tf; tests/infra/test_sizing.py evaluates these same expressions for every catalog type).
locals {
  sidecar_memory_mib = 256 # gpu-metrics beside each worker; the ray-control task on the head instance
  shm_headroom_mib   = 1024
  process_floor_mib  = 2048

  head_instance_memory_mib = floor(var.head_node.memory_mib * 0.9)
  # The head instance also hosts the trainers (the job drivers): 60% head (less the ray-control task), 40% for
  # concurrent_runs trainers, an equal share each.
  head_memory_mib          = floor(local.head_instance_memory_mib * 0.6) - local.sidecar_memory_mib
  head_object_store_mib    = floor(local.head_memory_mib * min(var.object_store_fraction, 0.25)) # schedules, holds few objects
  head_shm_mib             = local.head_object_store_mib + local.shm_headroom_mib
  trainer_memory_mib       = floor(local.head_instance_memory_mib * 0.4 / var.concurrent_runs)
  trainer_object_store_mib = floor(local.trainer_memory_mib * min(var.object_store_fraction, 0.25))
  trainer_shm_mib          = local.trainer_object_store_mib + local.shm_headroom_mib

  # Per worker group: memory, object store and shared memory of its worker task.
  worker_memory_mib       = { for g, w in var.worker_groups : g => floor(w.memory_mib * 0.9) - local.sidecar_memory_mib }
  worker_object_store_mib = { for g, m in local.worker_memory_mib : g => floor(m * var.object_store_fraction) }
  worker_shm_mib          = { for g, o in local.worker_object_store_mib : g => o + local.shm_headroom_mib }

  sizes = {
    head    = { memory = local.head_memory_mib, shm = local.head_shm_mib, object_store = local.head_object_store_mib }
    trainer = { memory = local.trainer_memory_mib, shm = local.trainer_shm_mib, object_store = local.trainer_object_store_mib }
    workers = { for g in keys(var.worker_groups) : g => { memory = local.worker_memory_mib[g], shm = local.worker_shm_mib[g], object_store = local.worker_object_store_mib[g] } }
  }
}
