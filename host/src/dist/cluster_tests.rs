//! Each launcher's variable set as it really sets it, and what fe-host makes of it.

use std::collections::HashMap;

use super::*;
use crate::dist::membership;

fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Rank 3 of `srun --nodes 2 --ntasks-per-node 2`: the second task on the second node.
const SRUN: [(&str, &str); 9] = [
    ("SLURM_PROCID", "3"),
    ("SLURM_NTASKS", "4"),
    ("SLURM_LOCALID", "1"),
    ("SLURM_NODEID", "1"),
    ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
    ("SLURM_TASKS_PER_NODE", "2(x2)"),
    ("SLURM_STEP_NODELIST", "gpu[07-08]"),
    ("SLURM_JOB_NODELIST", "gpu[07-08]"),
    ("SLURM_JOB_ID", "4281234"),
];

#[test]
fn slurm_host_lists_expand_ranges_padding_and_groups() {
    assert_eq!(
        expand_nodelist("node[01-03,07],gpu5").unwrap(),
        ["node01", "node02", "node03", "node07", "gpu5"]
    );
    assert_eq!(expand_nodelist("a1,b2 c3").unwrap(), ["a1", "b2", "c3"]);
    assert_eq!(
        expand_nodelist("r[1-2]n[9-10]").unwrap(),
        ["r1n9", "r1n10", "r2n9", "r2n10"]
    );
    assert_eq!(expand_nodelist("host[5]").unwrap(), ["host5"]);
    assert!(expand_nodelist("node[01-03")
        .unwrap_err()
        .contains("unclosed"));
    assert!(expand_nodelist("node[3-1]").unwrap_err().contains("[3-1]"));
    assert!(expand_nodelist("").is_err());
}

#[test]
fn slurm_tasks_per_node_lists_give_each_nodes_local_world() {
    assert_eq!(tasks_on_node("2(x3),1", 0), Ok(2));
    assert_eq!(tasks_on_node("2(x3),1", 2), Ok(2));
    assert_eq!(tasks_on_node("2(x3),1", 3), Ok(1));
    assert!(tasks_on_node("2(x3),1", 4).unwrap_err().contains("node 4"));
    assert!(tasks_on_node("two", 0).is_err());
}

#[test]
fn srun_variables_give_a_slurm_membership_with_the_store_on_the_first_node() {
    let got = membership(&vars(&SRUN)).unwrap().unwrap();
    assert_eq!(got.cluster, Cluster::Slurm);
    assert_eq!(
        (got.rank, got.world, got.local_rank, got.local_world),
        (3, 4, 1, 2)
    );
    assert_eq!(got.master_addr, "gpu07");
    // Lightning's rule: 15000 + the job id's last four digits.
    assert_eq!(got.master_port, 15000 + 1234);
    assert!(!got.hosts_store);
    // MASTER_ADDR and MASTER_PORT win when set.
    let mut env = vars(&SRUN);
    env.insert("MASTER_ADDR".into(), "10.1.2.3".into());
    env.insert("MASTER_PORT".into(), "29400".into());
    let got = membership(&env).unwrap().unwrap();
    assert_eq!(
        (got.master_addr.as_str(), got.master_port),
        ("10.1.2.3", 29400)
    );
    // Without a job id, Lightning's fixed default.
    let mut env = vars(&SRUN);
    env.remove("SLURM_JOB_ID");
    assert_eq!(membership(&env).unwrap().unwrap().master_port, 12910);
}

#[test]
fn slurm_without_a_node_list_or_per_node_counts_is_named() {
    let mut env = vars(&SRUN);
    for name in ["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"] {
        env.remove(name);
    }
    assert!(membership(&env)
        .unwrap_err()
        .contains("neither MASTER_ADDR nor any of SLURM_STEP_NODELIST"));
    let mut env = vars(&SRUN);
    for name in ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"] {
        env.remove(name);
    }
    assert!(membership(&env)
        .unwrap_err()
        .contains("SLURM_NTASKS_PER_NODE"));
    env.insert("SLURM_NTASKS_PER_NODE".into(), "2".into());
    assert_eq!(membership(&env).unwrap().unwrap().local_world, 2);
    let mut env = vars(&SRUN);
    env.insert("SLURM_PROCID".into(), "4".into());
    assert!(membership(&env)
        .unwrap_err()
        .contains("SLURM_PROCID=4 and SLURM_NTASKS=4 do not fit"));
}

#[test]
fn torchrun_inside_a_slurm_job_wins_over_slurms_variables() {
    let mut env = vars(&SRUN);
    for (name, value) in [
        ("RANK", "5"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "4"),
        ("MASTER_ADDR", "gpu07"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_RUN_ID", "job"),
    ] {
        env.insert(name.into(), value.into());
    }
    let got = membership(&env).unwrap().unwrap();
    assert_eq!(got.cluster, Cluster::Torchrun);
    assert_eq!(
        (got.rank, got.world, got.local_rank, got.local_world),
        (5, 8, 1, 4)
    );
}

#[test]
fn an_interactive_slurm_shell_is_one_process() {
    let mut env = vars(&SRUN);
    env.insert("SLURM_JOB_NAME".into(), "interactive".into());
    assert_eq!(membership(&env), Ok(None));
}

const MPIRUN: [(&str, &str); 6] = [
    ("OMPI_COMM_WORLD_RANK", "2"),
    ("OMPI_COMM_WORLD_SIZE", "4"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
    ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
    ("MASTER_ADDR", "head"),
    ("MASTER_PORT", "29500"),
];

#[test]
fn openmpi_variables_give_an_openmpi_membership() {
    let got = membership(&vars(&MPIRUN)).unwrap().unwrap();
    assert_eq!(got.cluster, Cluster::OpenMpi);
    assert_eq!(
        (got.rank, got.world, got.local_rank, got.local_world),
        (2, 4, 0, 2)
    );
    assert_eq!((got.master_addr.as_str(), got.master_port), ("head", 29500));
}

#[test]
fn openmpi_without_the_store_address_says_how_to_pass_it() {
    let mut env = vars(&MPIRUN);
    env.remove("MASTER_ADDR");
    let error = membership(&env).unwrap_err();
    assert!(
        error.starts_with("mpirun started this process but MASTER_ADDR is not set:"),
        "{error}"
    );
    assert!(error.contains("mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port>"));
    env.remove("MASTER_PORT");
    assert!(membership(&env)
        .unwrap_err()
        .contains("but MASTER_ADDR and MASTER_PORT are not set"));
    let mut env = vars(&MPIRUN);
    env.remove("OMPI_COMM_WORLD_LOCAL_SIZE");
    assert!(membership(&env)
        .unwrap_err()
        .contains("OMPI_COMM_WORLD_LOCAL_SIZE is not set"));
}

#[test]
fn a_pytorchjob_pod_is_local_rank_0_of_1() {
    // What the training operator sets in worker pod 1 of a 3-replica PyTorchJob.
    let env = vars(&[
        ("RANK", "1"),
        ("WORLD_SIZE", "3"),
        ("MASTER_ADDR", "job-master-0"),
        ("MASTER_PORT", "23456"),
        ("PET_NNODES", "3"),
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
    ]);
    let got = membership(&env).unwrap().unwrap();
    assert_eq!(got.cluster, Cluster::Kubeflow);
    assert_eq!(
        (got.rank, got.world, got.local_rank, got.local_world),
        (1, 3, 0, 1)
    );
    assert!(!got.hosts_store);
}

#[test]
fn launchers_have_display_names() {
    let names: Vec<String> = [
        Cluster::Torchrun,
        Cluster::Slurm,
        Cluster::OpenMpi,
        Cluster::Kubeflow,
        Cluster::Env,
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(names, ["torchrun", "slurm", "openmpi", "kubeflow", "env"]);
}
