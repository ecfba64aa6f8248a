//! 2-rank runs on loopback started with the variables of launchers other than torchrun — srun,
//! Kubeflow's PyTorchJob, OpenMPI's mpirun — each training the weights torchrun's variables
//! give, with rank 0 naming the launcher it detected.

use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::dist::{free_port, manifest, max_difference, train_ranks, wait_all, weights, SGD};
use crate::util::{fe_host, TempDir};

/// One epoch of LeNet on 2 ranks with torchrun's variables, trained once for every test here.
fn torchrun_reference() -> &'static TempDir {
    static DIR: OnceLock<TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = TempDir::new("cluster-torchrun");
        train_ranks(&dir, 2, &manifest(SGD, 32, 1, ""));
        dir
    })
}

/// `fe-host run` in `dir` with only `vars` saying where the rank is: none of torchrun's.
fn rank(dir: &TempDir, vars: &[(String, String)]) -> Command {
    let path = dir.write("m.toml", &manifest(SGD, 32, 1, ""));
    let mut command = fe_host();
    command
        .current_dir(dir.path())
        .args(["run", &*path.to_string_lossy()])
        .args(["--summary", "summary.json", "--save-weights", "weights"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
    ] {
        command.env_remove(name);
    }
    command.envs(vars.iter().map(|(k, v)| (k, v)));
    command
}

/// Starts 2 ranks with `vars(rank, port)`; both must finish, rank 0 saying `cluster: <name>`,
/// with the weights of the torchrun run.
fn trains_like_torchrun(name: &str, vars: impl Fn(usize, u16) -> Vec<(&'static str, String)>) {
    let reference = weights(&torchrun_reference().path().join("weights"));
    let dir = TempDir::new(&format!("cluster-{name}"));
    let port = free_port();
    let children = (0..2)
        .map(|r| {
            let set: Vec<(String, String)> = vars(r, port)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
            rank(&dir, &set).spawn().unwrap()
        })
        .collect();
    let runs = wait_all(children);
    for (r, run) in runs.iter().enumerate() {
        assert_eq!(run.code, 0, "rank {r}:\n{}\n{}", run.stdout, run.stderr);
    }
    assert_contains!(runs[0].stdout, format!("ranks: 2 (cluster: {name})"));
    let ours = weights(&dir.path().join("weights"));
    // The bound torchrun is held to against a direct launch (dist.rs): two 2-rank runs of the
    // same manifest can differ by an ulp; ranks that trained apart would differ by far more.
    let difference = max_difference(&ours, &reference);
    assert!(difference <= 1e-6, "{name} vs torchrun: {difference}");
}

#[test]
fn srun_variables_train_two_ranks_like_torchrun() {
    trains_like_torchrun("slurm", |r, port| {
        vec![
            ("SLURM_PROCID", r.to_string()),
            ("SLURM_NTASKS", "2".into()),
            ("SLURM_LOCALID", r.to_string()),
            ("SLURM_NODEID", "0".into()),
            ("SLURM_STEP_TASKS_PER_NODE", "2".into()),
            // The store's host comes from the node list; the port as a job script exports it.
            ("SLURM_STEP_NODELIST", "127.0.0.1".into()),
            ("SLURM_JOB_ID", "4242".into()),
            ("MASTER_PORT", port.to_string()),
        ]
    });
}

#[test]
fn pytorchjob_variables_train_two_ranks_like_torchrun() {
    trains_like_torchrun("kubeflow", |r, port| {
        vec![
            ("RANK", r.to_string()),
            ("WORLD_SIZE", "2".into()),
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", port.to_string()),
            ("PET_NNODES", "2".into()),
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1".into()),
        ]
    });
}

#[test]
fn mpirun_variables_train_two_ranks_like_torchrun() {
    trains_like_torchrun("openmpi", |r, port| {
        vec![
            ("OMPI_COMM_WORLD_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_SIZE", "2".into()),
            ("OMPI_COMM_WORLD_LOCAL_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2".into()),
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", port.to_string()),
        ]
    });
}

#[test]
fn mpirun_without_a_store_address_is_refused_naming_it() {
    let dir = TempDir::new("cluster-mpi-no-master");
    let vars = [
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let run: crate::util::Run = rank(&dir, &vars).output().unwrap().into();
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert_contains!(
        run.stderr,
        "mpirun started this process but MASTER_ADDR and MASTER_PORT are not set"
    );
}
