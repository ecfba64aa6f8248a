//! Collective check mode (`run.check_collectives = true` or `FE_CHECK_COLLECTIVES=1`; PyTorch's
//! `TORCH_DISTRIBUTED_DEBUG=DETAIL` for fe-host): before each collective, the ranks all-gather
//! a small fixed-size fingerprint of it — what it is, its dtype and sizes, the line of code that
//! issued it, the step and how many collectives came before — and compare. Ranks whose code
//! took different paths would otherwise hang until the timeout or, worse, sum unrelated
//! tensors; with the check, every rank fails at the first divergence, naming both call sites.

use std::panic::Location;

use tch::{Kind, Tensor};

/// The collectives [`super::SharedGroup`] issues, as the fingerprint names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collective {
    /// An elementwise sum over the ranks.
    Sum,
    /// An elementwise maximum over the ranks.
    Max,
    /// Gradients averaged after backward.
    GradientAverage,
    /// Gradients averaged in buckets during backward.
    OverlappedGradientAverage,
    /// Rank 0's tensors copied to every rank.
    Broadcast,
    /// Every rank's bytes, to every rank.
    AllGather,
    /// Every rank waits for the others.
    Barrier,
}

impl Collective {
    const ALL: [Collective; 7] = [
        Collective::Sum,
        Collective::Max,
        Collective::GradientAverage,
        Collective::OverlappedGradientAverage,
        Collective::Broadcast,
        Collective::AllGather,
        Collective::Barrier,
    ];

    fn name(self) -> &'static str {
        match self {
            Collective::Sum => "all-reduce sum",
            Collective::Max => "all-reduce max",
            Collective::GradientAverage => "gradient all-reduce",
            Collective::OverlappedGradientAverage => "gradient all-reduce during backward",
            Collective::Broadcast => "broadcast",
            Collective::AllGather => "all-gather",
            Collective::Barrier => "barrier",
        }
    }

    fn code(self) -> u8 {
        Self::ALL.iter().position(|&c| c == self).unwrap_or(0) as u8 + 1
    }

    fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }
}

/// What the ranks compare before a collective. `numel` is `None` where the ranks may send
/// different sizes by design (gathered bytes are padded to the longest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// Which collective.
    pub collective: Collective,
    /// The dtype of its tensors (`None`: none, as for a barrier).
    pub kind: Option<Kind>,
    /// How many elements it carries in all, when every rank must send as many.
    pub numel: Option<i64>,
    /// A hash of its tensors' shapes, in order (0 when `numel` is `None`).
    pub shapes: u64,
    /// The line that issued it.
    pub file: String,
    /// Its line number.
    pub line: u32,
    /// The step the run was at.
    pub step: u64,
    /// How many checked collectives this rank issued before it.
    pub sequence: u64,
}

/// The bytes a fingerprint takes on the wire: fixed, so that it goes in one all-gather.
pub const SIZE: usize = 4 + 4 + 8 * 4 + FILE_BYTES;
/// Room for the file of the call site; longer paths keep their end.
const FILE_BYTES: usize = 128;

impl Fingerprint {
    /// The fingerprint of `collective` over `tensors`, issued at `site`; `sizes_agree`: every
    /// rank must send as many elements, in tensors of the same shapes.
    pub fn new(
        collective: Collective,
        tensors: &[Tensor],
        sizes_agree: bool,
        site: &'static Location<'static>,
    ) -> Self {
        let sizes: Vec<Vec<i64>> = tensors.iter().map(Tensor::size).collect();
        let kind = tensors.first().map(Tensor::kind);
        Self::of_sizes(collective, kind, sizes_agree.then_some(&sizes[..]), site)
    }

    /// The fingerprint of a collective over tensors of `kind` with `sizes` (`None`: sizes that
    /// may differ between the ranks), issued at `site`.
    pub fn of_sizes(
        collective: Collective,
        kind: Option<Kind>,
        sizes: Option<&[Vec<i64>]>,
        site: &'static Location<'static>,
    ) -> Self {
        let shapes = sizes.map_or(0, |sizes| {
            sizes.iter().fold(FNV_OFFSET, |hash, size| {
                let hash = size.iter().fold(hash, |h, dim| fnv(h, &dim.to_le_bytes()));
                fnv(hash, b";")
            })
        });
        Self {
            collective,
            kind,
            numel: sizes.map(|sizes| sizes.iter().map(|s| s.iter().product::<i64>()).sum()),
            shapes,
            file: site.file().to_owned(),
            line: site.line(),
            step: 0,
            sequence: 0,
        }
    }

    /// The wire form (see [`SIZE`]).
    pub fn encode(&self) -> [u8; SIZE] {
        let mut out = [0u8; SIZE];
        out[0] = self.collective.code();
        out[1] = self.kind.map_or(0, kind_code);
        out[2] = u8::from(self.numel.is_some());
        out[4..8].copy_from_slice(&self.line.to_le_bytes());
        out[8..16].copy_from_slice(&self.step.to_le_bytes());
        out[16..24].copy_from_slice(&self.sequence.to_le_bytes());
        out[24..32].copy_from_slice(&self.numel.unwrap_or(0).to_le_bytes());
        out[32..40].copy_from_slice(&self.shapes.to_le_bytes());
        let file = self.file.as_bytes();
        let tail = &file[file.len().saturating_sub(FILE_BYTES)..];
        out[40..40 + tail.len()].copy_from_slice(tail);
        out
    }

    /// The inverse of [`Fingerprint::encode`]; `None` for bytes it did not write.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; SIZE] = bytes.try_into().ok()?;
        let word = |at: usize| -> Option<[u8; 8]> { bytes[at..at + 8].try_into().ok() };
        let file = &bytes[40..];
        let end = file.iter().position(|&b| b == 0).unwrap_or(file.len());
        Some(Self {
            collective: Collective::from_code(bytes[0])?,
            kind: kind_from_code(bytes[1]),
            numel: (bytes[2] == 1).then_some(i64::from_le_bytes(word(24)?)),
            line: u32::from_le_bytes(bytes[4..8].try_into().ok()?),
            step: u64::from_le_bytes(word(8)?),
            sequence: u64::from_le_bytes(word(16)?),
            shapes: u64::from_le_bytes(word(32)?),
            file: String::from_utf8_lossy(&file[..end]).into_owned(),
        })
    }

    /// `host/src/x.rs:88 (all-reduce sum f64[2], step 12, collective #57)`, for messages.
    fn describe(&self, with_step: bool) -> String {
        let carries = match (self.kind, self.numel) {
            (None, _) => String::new(),
            (Some(kind), Some(numel)) => format!(" {}[{numel}]", kind_name(kind)),
            (Some(kind), None) => format!(" {}", kind_name(kind)),
        };
        let step = if with_step {
            format!("step {}, ", self.step)
        } else {
            String::new()
        };
        format!(
            "{}:{} ({}{carries}, {step}collective #{})",
            self.file,
            self.line,
            self.collective.name(),
            self.sequence + 1
        )
    }
}

/// Compares every rank's fingerprint (`gathered`, in rank order) with rank 0's; the one line
/// every rank fails with at the first that differs (every rank gathered the same bytes, so
/// every rank says the same thing).
pub fn compare(rank: usize, world: usize, gathered: &[Fingerprint]) -> Result<(), String> {
    let Some(first) = gathered.first() else {
        return Ok(());
    };
    let Some((other, theirs)) = gathered.iter().enumerate().find(|(_, f)| *f != first) else {
        return Ok(());
    };
    let steps_differ = theirs.step != first.step;
    Err(format!(
        "rank {rank} of {world}: collective mismatch at step {}: rank 0 at {} but rank {other} at {} (run.check_collectives: the ranks' code took different paths)",
        first.step,
        first.describe(steps_differ),
        theirs.describe(steps_differ),
    ))
}

/// Whether check mode is asked for in the environment (`FE_CHECK_COLLECTIVES=1` or `true`).
pub fn asked_in_env() -> bool {
    std::env::var("FE_CHECK_COLLECTIVES")
        .is_ok_and(|v| matches!(v.trim().to_lowercase().as_str(), "1" | "true" | "yes"))
}

/// A test hook (`FE_TEST_SKIP_COLLECTIVE=<rank>:<step>`, undocumented): on that rank, the first
/// all-reduce, broadcast, all-gather or barrier issued at that step or later is skipped, as a
/// bug in a rank's control flow would skip it, so that tests can see check mode catch it.
pub fn skip_from_env(rank: usize) -> Option<u64> {
    let spec = std::env::var("FE_TEST_SKIP_COLLECTIVE").ok()?;
    let (who, step) = spec.split_once(':')?;
    (who.trim().parse::<usize>().ok()? == rank)
        .then(|| step.trim().parse().ok())
        .flatten()
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

const KINDS: [(Kind, &str); 11] = [
    (Kind::Uint8, "u8"),
    (Kind::Int8, "i8"),
    (Kind::Int16, "i16"),
    (Kind::Int, "i32"),
    (Kind::Int64, "i64"),
    (Kind::Half, "f16"),
    (Kind::Float, "f32"),
    (Kind::Double, "f64"),
    (Kind::Bool, "bool"),
    (Kind::BFloat16, "bf16"),
    (Kind::ComplexFloat, "c64"),
];

fn kind_code(kind: Kind) -> u8 {
    KINDS
        .iter()
        .position(|(k, _)| *k == kind)
        .map_or(255, |i| i as u8 + 1)
}

fn kind_from_code(code: u8) -> Option<Kind> {
    KINDS
        .get(usize::from(code).checked_sub(1)?)
        .map(|(k, _)| *k)
}

fn kind_name(kind: Kind) -> &'static str {
    KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("other", |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: u32, collective: Collective, numel: i64) -> Fingerprint {
        Fingerprint {
            collective,
            kind: Some(Kind::Double),
            numel: Some(numel),
            shapes: 7,
            file: "host/src/estimator/epoch.rs".to_owned(),
            line,
            step: 12,
            sequence: 56,
        }
    }

    #[test]
    fn a_fingerprint_survives_the_wire() {
        let fingerprint = at(88, Collective::Max, 2);
        let back = Fingerprint::decode(&fingerprint.encode()).unwrap();
        assert_eq!(back, fingerprint);
        let mut loose = Fingerprint::new(
            Collective::AllGather,
            &[Tensor::zeros([5], (Kind::Uint8, tch::Device::Cpu))],
            false,
            Location::caller(),
        );
        loose.file = "x".repeat(300);
        let back = Fingerprint::decode(&loose.encode()).unwrap();
        assert_eq!((back.numel, back.file.len()), (None, FILE_BYTES));
        assert!(Fingerprint::decode(&[0u8; SIZE]).is_none());
    }

    #[test]
    fn the_first_rank_that_differs_is_named_with_both_call_sites() {
        let same = [at(88, Collective::Max, 2), at(88, Collective::Max, 2)];
        assert_eq!(compare(0, 2, &same), Ok(()));
        let mut later = at(140, Collective::GradientAverage, 61706);
        later.step = 13;
        later.sequence = 57;
        let message = compare(1, 3, &[same[0].clone(), same[1].clone(), later]).unwrap_err();
        assert_eq!(
            message,
            "rank 1 of 3: collective mismatch at step 12: rank 0 at host/src/estimator/epoch.rs:88 \
             (all-reduce max f64[2], step 12, collective #57) but rank 2 at \
             host/src/estimator/epoch.rs:140 (gradient all-reduce f64[61706], step 13, collective #58) \
             (run.check_collectives: the ranks' code took different paths)"
        );
        // The same call with other sizes is a mismatch too.
        let bigger = at(88, Collective::Max, 3);
        let message = compare(0, 2, &[same[0].clone(), bigger]).unwrap_err();
        assert!(message.contains("but rank 1 at host/src/estimator/epoch.rs:88 (all-reduce max f64[3], collective #57)"), "{message}");
    }
}
