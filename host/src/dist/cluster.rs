//! Which launcher started this process, and the place it gave it, read from that launcher's
//! own variables: torchrun, SLURM's `srun`, OpenMPI's `mpirun`, Kubeflow's PyTorchJob, or
//! plain `RANK`/`WORLD_SIZE` set by hand.

use std::collections::HashMap;
use std::fmt;

/// The launcher whose variables describe this process's place in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cluster {
    /// torchrun (also `fe-host run --nproc`, which sets torchrun's variables).
    Torchrun,
    /// `srun` without torchrun: `SLURM_*`.
    Slurm,
    /// `mpirun` of OpenMPI: `OMPI_COMM_WORLD_*`.
    OpenMpi,
    /// Kubeflow's PyTorchJob: `RANK`/`WORLD_SIZE`, one rank per pod.
    Kubeflow,
    /// `RANK`/`WORLD_SIZE`/`MASTER_*` set some other way.
    Env,
}

impl fmt::Display for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Torchrun => "torchrun",
            Self::Slurm => "slurm",
            Self::OpenMpi => "openmpi",
            Self::Kubeflow => "kubeflow",
            Self::Env => "env",
        })
    }
}

impl Cluster {
    /// The variables that give rank, world, local rank and local world under this launcher.
    pub fn variable_names(self) -> [&'static str; 4] {
        match self {
            Self::Slurm => [
                "SLURM_PROCID",
                "SLURM_NTASKS",
                "SLURM_LOCALID",
                "SLURM_STEP_TASKS_PER_NODE",
            ],
            Self::OpenMpi => [
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
            ],
            _ => ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
        }
    }

    /// The launcher `vars` name, `None` for a process started alone. torchrun first: a SLURM
    /// job or a PyTorchJob that runs torchrun inside has both sets, and torchrun's describe
    /// the processes it started.
    pub fn detect(vars: &HashMap<String, String>) -> Option<Self> {
        let has = |name: &str| vars.contains_key(name);
        // `salloc`'s shell and `srun --job-name=interactive` hold an allocation without being
        // the ranks of one (Lightning's `SLURMEnvironment.detect` skips them the same way).
        let interactive = matches!(
            vars.get("SLURM_JOB_NAME").map(String::as_str),
            Some("bash" | "interactive")
        );
        if has("TORCHELASTIC_RUN_ID") || (has("LOCAL_RANK") && has("RANK")) {
            Some(Self::Torchrun)
        } else if has("SLURM_PROCID") && has("SLURM_NTASKS") && !interactive {
            Some(Self::Slurm)
        } else if has("OMPI_COMM_WORLD_RANK") || has("OMPI_COMM_WORLD_SIZE") {
            Some(Self::OpenMpi)
        } else if has("RANK") || has("WORLD_SIZE") {
            // The training operator sets PET_* (torchrun's options) in every PyTorchJob pod, and
            // every pod sees the API server's address.
            let kubeflow =
                has("KUBERNETES_SERVICE_HOST") || vars.keys().any(|k| k.starts_with("PET_"));
            Some(if kubeflow { Self::Kubeflow } else { Self::Env })
        } else {
            None
        }
    }
}

/// A rank's place as a launcher describes it, before the checks every launcher shares.
pub(super) struct Place {
    pub rank: usize,
    pub world: usize,
    pub local_rank: usize,
    pub local_world: usize,
    pub master_addr: String,
    pub master_port: u16,
}

/// `name`'s value as a non-negative integer, or an error naming it.
pub(super) fn number(vars: &HashMap<String, String>, name: &str) -> Result<usize, String> {
    let text = vars.get(name).map(String::as_str).unwrap_or_default();
    text.trim()
        .parse::<usize>()
        .map_err(|_| format!("environment variable {name}={text:?} is not a non-negative integer"))
}

/// `MASTER_PORT` as a port, or an error naming it.
pub(super) fn port(vars: &HashMap<String, String>) -> Result<u16, String> {
    let text = vars
        .get("MASTER_PORT")
        .map(String::as_str)
        .unwrap_or_default();
    text.trim()
        .parse::<u16>()
        .ok()
        .filter(|port| *port != 0)
        .ok_or_else(|| format!("environment variable MASTER_PORT={text:?} is not a port (1-65535)"))
}

fn required(vars: &HashMap<String, String>, names: &[&str], launcher: &str) -> Result<(), String> {
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !vars.contains_key(*n))
        .collect();
    match missing.as_slice() {
        [] => Ok(()),
        [one] => Err(format!(
            "environment variable {one} is not set, but {launcher} started this process"
        )),
        many => Err(format!(
            "environment variables {} are not set, but {launcher} started this process",
            many.join(", ")
        )),
    }
}

/// `srun`'s place: `SLURM_PROCID` of `SLURM_NTASKS`, `SLURM_LOCALID` of this node's entry in
/// the tasks-per-node list; the store on the step's first node unless `MASTER_ADDR` says
/// otherwise.
pub(super) fn slurm(vars: &HashMap<String, String>) -> Result<Place, String> {
    required(
        vars,
        &["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"],
        "srun",
    )?;
    let node = if vars.contains_key("SLURM_NODEID") {
        number(vars, "SLURM_NODEID")?
    } else {
        0
    };
    // The step's layout first: a step may use fewer tasks than the job.
    const PER_NODE: [&str; 3] = [
        "SLURM_STEP_TASKS_PER_NODE",
        "SLURM_TASKS_PER_NODE",
        "SLURM_NTASKS_PER_NODE",
    ];
    let (name, text) = PER_NODE
        .iter()
        .find_map(|name| vars.get(*name).map(|text| (*name, text)))
        .ok_or_else(|| format!("none of {} is set, but srun started this process: cannot tell how many ranks share its node", PER_NODE.join(", ")))?;
    // `--ntasks-per-node` is one count for every node; the others list each node's.
    let node = if name == "SLURM_NTASKS_PER_NODE" {
        0
    } else {
        node
    };
    let local_world = tasks_on_node(text, node)
        .map_err(|problem| format!("environment variable {name}={text:?}: {problem}"))?;
    let master_addr = match vars.get("MASTER_ADDR") {
        Some(addr) => addr.clone(),
        None => {
            const LISTS: [&str; 3] = [
                "SLURM_STEP_NODELIST",
                "SLURM_JOB_NODELIST",
                "SLURM_NODELIST",
            ];
            let (name, list) = LISTS
                .iter()
                .find_map(|name| vars.get(*name).map(|list| (*name, list)))
                .ok_or_else(|| format!("neither MASTER_ADDR nor any of {} is set: cannot tell where rank 0's store is", LISTS.join(", ")))?;
            let hosts = expand_nodelist(list)
                .map_err(|problem| format!("environment variable {name}={list:?}: {problem}"))?;
            hosts.into_iter().next().unwrap_or_default()
        }
    };
    let master_port = if vars.contains_key("MASTER_PORT") {
        port(vars)?
    } else {
        job_port(vars.get("SLURM_JOB_ID").map(String::as_str))
    };
    Ok(Place {
        rank: number(vars, "SLURM_PROCID")?,
        world: number(vars, "SLURM_NTASKS")?,
        local_rank: number(vars, "SLURM_LOCALID")?,
        local_world,
        master_addr,
        master_port,
    })
}

/// The port every rank of a SLURM job derives alike: 15000 + the job id's last four digits,
/// 12910 without a job id — Lightning's rule (`SLURMEnvironment.main_port` in
/// lightning/fabric/plugins/environments/slurm.py), so a job moved from Lightning keeps its
/// port.
fn job_port(job_id: Option<&str>) -> u16 {
    match job_id.and_then(|id| id.trim().parse::<u64>().ok()) {
        Some(id) => 15000 + (id % 10000) as u16,
        None => 12910,
    }
}

/// `mpirun`'s place: `OMPI_COMM_WORLD_*`. OpenMPI starts no rendezvous store, so
/// `MASTER_ADDR`/`MASTER_PORT` must come with it (`mpirun -x MASTER_ADDR=… -x MASTER_PORT=…`).
pub(super) fn openmpi(vars: &HashMap<String, String>) -> Result<Place, String> {
    required(
        vars,
        &[
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ],
        "mpirun",
    )?;
    let missing: Vec<&str> = ["MASTER_ADDR", "MASTER_PORT"]
        .into_iter()
        .filter(|n| !vars.contains_key(*n))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "mpirun started this process but {} not set: OpenMPI runs no rendezvous store, pass rank 0's host and a free port with `mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port>`",
            match missing.as_slice() { [one] => format!("{one} is"), _ => "MASTER_ADDR and MASTER_PORT are".to_owned() }
        ));
    }
    Ok(Place {
        rank: number(vars, "OMPI_COMM_WORLD_RANK")?,
        world: number(vars, "OMPI_COMM_WORLD_SIZE")?,
        local_rank: number(vars, "OMPI_COMM_WORLD_LOCAL_RANK")?,
        local_world: number(vars, "OMPI_COMM_WORLD_LOCAL_SIZE")?,
        master_addr: vars.get("MASTER_ADDR").cloned().unwrap_or_default(),
        master_port: port(vars)?,
    })
}

/// How many tasks SLURM's tasks-per-node list (`2(x3),1`: three nodes of 2, then one of 1)
/// puts on node `node`.
fn tasks_on_node(list: &str, node: usize) -> Result<usize, String> {
    let mut seen = 0;
    for entry in list.split(',') {
        let entry = entry.trim();
        let (count, repeat) = match entry.split_once("(x") {
            Some((count, rest)) => (count, rest.strip_suffix(')').ok_or("an unclosed \"(x\"")?),
            None => (entry, "1"),
        };
        let count: usize = count
            .parse()
            .map_err(|_| format!("{entry:?} is not a task count"))?;
        let repeat: usize = repeat
            .parse()
            .map_err(|_| format!("{entry:?} is not a task count"))?;
        seen += repeat;
        if node < seen {
            return Ok(count);
        }
    }
    Err(format!(
        "it lists {seen} node(s), and this is node {node} (SLURM_NODEID)"
    ))
}

/// The hosts of SLURM's compressed host list: `node[01-03,07],gpu5` is node01, node02,
/// node03, node07, gpu5 (zero padding kept; several bracket groups in a name multiply).
pub fn expand_nodelist(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for name in split_top_level(list)? {
        let mut expanded = vec![String::new()];
        let mut rest = name.as_str();
        while !rest.is_empty() {
            let (literal, after) = rest.split_at(rest.find('[').unwrap_or(rest.len()));
            expanded.iter_mut().for_each(|host| host.push_str(literal));
            if after.is_empty() {
                break;
            }
            let close = after
                .find(']')
                .ok_or_else(|| format!("{name:?} has an unclosed '['"))?;
            let choices = range_choices(&after[1..close])?;
            expanded = expanded
                .iter()
                .flat_map(|host| choices.iter().map(move |choice| format!("{host}{choice}")))
                .collect();
            rest = &after[close + 1..];
        }
        hosts.extend(expanded);
    }
    if hosts.is_empty() {
        return Err("the host list is empty".to_owned());
    }
    Ok(hosts)
}

/// The names of `list` split at the commas outside brackets (and at spaces).
fn split_top_level(list: &str) -> Result<Vec<String>, String> {
    let (mut names, mut current, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in list.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or("a ']' without its '['")?,
            _ => {}
        }
        if (c == ',' || c == ' ') && depth == 0 {
            if !current.is_empty() {
                names.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        names.push(current);
    }
    Ok(names)
}

/// `01-03,07` → 01, 02, 03, 07, each as wide as its range's first bound.
fn range_choices(inside: &str) -> Result<Vec<String>, String> {
    let mut choices = Vec::new();
    for part in inside.split(',') {
        let bad = || format!("[{inside}] is not a list of numbers and ranges");
        let (low, high) = part.split_once('-').unwrap_or((part, part));
        let (from, to): (u64, u64) = (
            low.parse().map_err(|_| bad())?,
            high.parse().map_err(|_| bad())?,
        );
        if to < from || to - from > 100_000 {
            return Err(bad());
        }
        choices.extend((from..=to).map(|n| format!("{n:0width$}", width = low.len())));
    }
    Ok(choices)
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
