//! Where a data-parallel rank trains: its device, from its place on its machine. (Who writes
//! the run's outputs is [`super::Strategy::writes_outputs`].)

/// The device a data-parallel rank trains on: the CPU as asked, or its own GPU when asked for
/// CUDA, whatever index was named — see [`gpu_for`].
pub fn rank_device(
    device: tch::Device,
    membership: &super::Membership,
) -> Result<tch::Device, String> {
    let tch::Device::Cuda(_) = device else {
        return Ok(device);
    };
    if !super::nccl_built() {
        return Err(format!(
            "rank {} of {} would train on a GPU, but this fe-host was built without NCCL (run scripts/env.sh, then rebuild); pass --device cpu to train on CPU ranks",
            membership.rank, membership.world
        ));
    }
    let visible = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
    let own_gpus = std::env::var_os("CUDA_VISIBLE_DEVICES").is_some();
    if visible == 1 && membership.local_world > 1 && !own_gpus {
        return Err(format!(
            "rank {} of {}: the {} ranks on this machine would share its one GPU, and NCCL needs a GPU per rank; start one rank per GPU (or train on CPU ranks with --device cpu)",
            membership.rank, membership.world, membership.local_world
        ));
    }
    gpu_for(membership.local_rank, visible)
        .map(tch::Device::Cuda)
        .map_err(|problem| {
            format!(
                "rank {} of {}: {problem}",
                membership.rank, membership.world
            )
        })
}

/// The GPU of the rank with `local_rank` on a machine that shows it `visible` GPUs: its local
/// rank (torchrun's convention, and DDP's `device_ids=[local_rank]`), or the only GPU when the
/// launcher gave each rank its own (CUDA_VISIBLE_DEVICES per task, as SLURM's
/// `--gpus-per-task` does).
pub fn gpu_for(local_rank: usize, visible: usize) -> Result<usize, String> {
    match visible {
        0 => Err("CUDA was asked for, but no GPU is visible to this rank".to_owned()),
        1 => Ok(0),
        n if local_rank < n => Ok(local_rank),
        n => Err(format!(
            "local rank {local_rank} trains on cuda:{local_rank}, but this machine shows {n} GPUs: start at most {n} ranks per machine, or give each rank its own GPU with CUDA_VISIBLE_DEVICES"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::gpu_for;

    #[test]
    fn each_local_rank_gets_its_own_gpu_or_the_only_one_it_sees() {
        assert_eq!(gpu_for(0, 4), Ok(0));
        assert_eq!(gpu_for(3, 4), Ok(3));
        // One GPU per rank through CUDA_VISIBLE_DEVICES: each sees its own as cuda:0.
        assert_eq!(gpu_for(5, 1), Ok(0));
        let too_many = gpu_for(4, 4).unwrap_err();
        assert!(
            too_many.contains("at most 4 ranks per machine"),
            "{too_many}"
        );
        assert!(gpu_for(0, 0).is_err());
    }
}
