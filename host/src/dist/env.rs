//! Which rank this process is, of how many, how many share its machine, and where the
//! rendezvous store is: from torchrun's variables, or SLURM's, OpenMPI's or Kubeflow's
//! (`cluster.rs` tells them apart).

use std::collections::HashMap;
use std::time::Duration;

pub use super::cluster::Cluster;
use super::cluster::{number, port, Place};

/// Where and as whom this process joins the group, read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// This process's rank in `0..world`.
    pub rank: usize,
    /// How many processes train together.
    pub world: usize,
    /// This process's rank on its machine (its GPU index under NCCL).
    pub local_rank: usize,
    /// How many ranks run on this machine.
    pub local_world: usize,
    /// The rendezvous store's host.
    pub master_addr: String,
    /// The rendezvous store's port.
    pub master_port: u16,
    /// Whether this process hosts the store: rank 0, unless torchrun's agent already does.
    pub hosts_store: bool,
    /// Store key prefix: separates elastic restart attempts on an agent store that outlives them.
    pub store_prefix: String,
    /// Which network device gloo binds to.
    pub gloo_device: GlooDevice,
    /// The launcher whose variables gave this place.
    pub cluster: Cluster,
}

/// The network device gloo binds to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GlooDevice {
    /// An address (loopback when every rank is on this machine).
    Address(String),
    /// A named interface (`GLOO_SOCKET_IFNAME`).
    Interface(String),
    /// This host's resolved name, falling back to loopback (libtorch's default).
    Default,
}

/// The variables a torchrun, Kubeflow or hand-started rank needs.
const REQUIRED: [&str; 4] = ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"];

/// "environment variable X is" / "environment variables X, Y are".
fn variables(names: &[&str]) -> String {
    match names {
        [one] => format!("environment variable {one} is"),
        _ => format!("environment variables {} are", names.join(", ")),
    }
}

/// The membership described by `vars` (the process environment) under the launcher they name
/// (see [`Cluster::detect`]), `None` for a single process, or an error naming the variable
/// that is missing or malformed.
pub fn membership(vars: &HashMap<String, String>) -> Result<Option<Membership>, String> {
    let Some(cluster) = Cluster::detect(vars) else {
        return Ok(None);
    };
    let place = match cluster {
        Cluster::Slurm => super::cluster::slurm(vars)?,
        Cluster::OpenMpi => super::cluster::openmpi(vars)?,
        Cluster::Torchrun | Cluster::Kubeflow | Cluster::Env => rank_variables(vars, cluster)?,
    };
    let Place {
        rank,
        world,
        local_rank,
        local_world,
        master_addr,
        master_port,
    } = place;
    let [r, w, lr, lw] = cluster.variable_names();
    if world == 0 || rank >= world {
        return Err(format!(
            "environment variables {r}={rank} and {w}={world} do not fit: {r} must be below {w}"
        ));
    }
    if local_world == 0 || local_rank >= local_world {
        return Err(format!(
            "environment variables {lr}={local_rank} and {lw}={local_world} do not fit: {lr} must be below {lw}"
        ));
    }
    if master_addr.trim().is_empty() {
        return Err("environment variable MASTER_ADDR is empty".to_owned());
    }
    let agent_store = vars.get("TORCHELASTIC_USE_AGENT_STORE").map(String::as_str) == Some("True");
    let attempt = vars
        .get("TORCHELASTIC_RESTART_COUNT")
        .map(String::as_str)
        .unwrap_or("0");
    let gloo_device = match vars.get("GLOO_SOCKET_IFNAME") {
        Some(interface) if !interface.is_empty() => GlooDevice::Interface(interface.clone()),
        _ if is_loopback(&master_addr) => GlooDevice::Address("127.0.0.1".to_owned()),
        _ => GlooDevice::Default,
    };
    Ok(Some(Membership {
        rank,
        world,
        local_rank,
        local_world,
        master_addr,
        master_port,
        hosts_store: rank == 0 && !agent_store,
        // The prefix torch.distributed uses on an agent store, so keys of a failed attempt
        // never satisfy a wait of the next.
        store_prefix: format!("/worker/attempt_{attempt}"),
        gloo_device,
        cluster,
    }))
}

/// torchrun's, Kubeflow's and hand-set variables: `RANK` of `WORLD_SIZE`, the store at
/// `MASTER_ADDR:MASTER_PORT`. Without `LOCAL_*`, Kubeflow's pods hold one rank each (local
/// rank 0 of 1); a hand-started rank is alone on its machine too, unless the store is on
/// loopback, where every rank must be on this machine.
fn rank_variables(vars: &HashMap<String, String>, cluster: Cluster) -> Result<Place, String> {
    let missing: Vec<&str> = REQUIRED
        .into_iter()
        .filter(|name| !vars.contains_key(*name))
        .collect();
    if !missing.is_empty() {
        let set: Vec<&str> = REQUIRED
            .into_iter()
            .filter(|name| vars.contains_key(*name))
            .collect();
        return Err(format!(
            "{} not set, but {} set: a data-parallel rank needs RANK, WORLD_SIZE, MASTER_ADDR \
             and MASTER_PORT (torchrun and Kubeflow's PyTorchJob set them all)",
            variables(&missing),
            variables(&set),
        ));
    }
    let rank = number(vars, "RANK")?;
    let world = number(vars, "WORLD_SIZE")?;
    let master_addr = vars.get("MASTER_ADDR").cloned().unwrap_or_default();
    let all_here =
        cluster == Cluster::Torchrun || (cluster == Cluster::Env && is_loopback(&master_addr));
    let local_world = match vars.contains_key("LOCAL_WORLD_SIZE") {
        true => number(vars, "LOCAL_WORLD_SIZE")?,
        false if all_here => world,
        false => 1,
    };
    let local_rank = if vars.contains_key("LOCAL_RANK") {
        number(vars, "LOCAL_RANK")?
    } else {
        // Ranks fill machines in order (torchrun's and SLURM's layout).
        rank % local_world.max(1)
    };
    Ok(Place {
        rank,
        world,
        local_rank,
        local_world,
        master_port: port(vars)?,
        master_addr,
    })
}

/// Whether every rank can reach the store over loopback, so gloo binds there too.
fn is_loopback(addr: &str) -> bool {
    addr == "localhost" || addr.starts_with("127.") || addr == "::1"
}

/// The process-group timeout when the manifest names none: torch.distributed's default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const TORCHRUN: [(&str, &str); 6] = [
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ];

    #[test]
    fn no_rank_variables_means_one_process() {
        assert_eq!(membership(&vars(&[("MASTER_PORT", "1")])), Ok(None));
    }

    #[test]
    fn torchrun_variables_give_a_membership() {
        let got = membership(&vars(&TORCHRUN)).unwrap().unwrap();
        assert_eq!(
            (got.rank, got.world, got.local_rank, got.local_world),
            (1, 2, 1, 2)
        );
        assert_eq!(got.master_port, 29500);
        assert!(!got.hosts_store);
        assert_eq!(got.gloo_device, GlooDevice::Address("127.0.0.1".to_owned()));
        assert_eq!(got.store_prefix, "/worker/attempt_0");
    }

    #[test]
    fn rank_zero_hosts_the_store_unless_the_agent_does() {
        let mut env = vars(&TORCHRUN);
        env.insert("RANK".into(), "0".into());
        assert!(membership(&env).unwrap().unwrap().hosts_store);
        env.insert("TORCHELASTIC_USE_AGENT_STORE".into(), "True".into());
        env.insert("TORCHELASTIC_RESTART_COUNT".into(), "3".into());
        let got = membership(&env).unwrap().unwrap();
        assert!(!got.hosts_store);
        assert_eq!(got.store_prefix, "/worker/attempt_3");
    }

    #[test]
    fn remote_master_and_interface_choose_the_gloo_device() {
        let mut env = vars(&TORCHRUN);
        env.insert("MASTER_ADDR".into(), "node-0.cluster".into());
        assert_eq!(
            membership(&env).unwrap().unwrap().gloo_device,
            GlooDevice::Default
        );
        env.insert("GLOO_SOCKET_IFNAME".into(), "eth0".into());
        assert_eq!(
            membership(&env).unwrap().unwrap().gloo_device,
            GlooDevice::Interface("eth0".into())
        );
    }

    #[test]
    fn missing_or_malformed_variables_are_named() {
        let mut env = vars(&TORCHRUN);
        env.remove("MASTER_PORT");
        assert!(membership(&env)
            .unwrap_err()
            .contains("MASTER_PORT is not set"));
        let mut env = vars(&TORCHRUN);
        env.insert("RANK".into(), "two".into());
        assert!(membership(&env).unwrap_err().contains("RANK=\"two\""));
        let mut env = vars(&TORCHRUN);
        env.insert("RANK".into(), "2".into());
        assert!(membership(&env)
            .unwrap_err()
            .contains("RANK must be below WORLD_SIZE"));
        let mut env = vars(&TORCHRUN);
        env.insert("MASTER_PORT".into(), "70000".into());
        assert!(membership(&env)
            .unwrap_err()
            .contains("MASTER_PORT=\"70000\""));
        // Only RANK: the message says what is missing and what is set, without contradiction.
        let env = vars(&[("RANK", "0")]);
        assert!(membership(&env).unwrap_err().starts_with(
            "environment variables WORLD_SIZE, MASTER_ADDR, MASTER_PORT are not set, but \
             environment variable RANK is set:"
        ));
        let mut env = vars(&TORCHRUN);
        env.insert("LOCAL_RANK".into(), "3".into());
        assert!(membership(&env)
            .unwrap_err()
            .contains("LOCAL_RANK must be below LOCAL_WORLD_SIZE"));
    }

    #[test]
    fn without_local_variables_a_rank_is_alone_on_its_machine_unless_the_store_is_on_loopback() {
        let mut env = vars(&TORCHRUN);
        env.remove("LOCAL_RANK");
        env.remove("LOCAL_WORLD_SIZE");
        // Plain variables with the store on loopback: every rank is on this machine.
        let got = membership(&env).unwrap().unwrap();
        assert_eq!(got.cluster, Cluster::Env);
        assert_eq!((got.local_rank, got.local_world), (1, 2));
        // The store elsewhere: one rank per machine, as a PyTorchJob pod or a hand-started node.
        env.insert("MASTER_ADDR".into(), "node-0.cluster".into());
        let got = membership(&env).unwrap().unwrap();
        assert_eq!(got.cluster, Cluster::Env);
        assert_eq!((got.local_rank, got.local_world), (0, 1));
    }
}
