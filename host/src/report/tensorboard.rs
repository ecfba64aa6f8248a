//! TensorBoard event files, written by hand: the maintained Rust crates for this are dead, and
//! scalars need only three small protobuf messages in TFRecord framing.
//!
//! Give each mode its own writer and directory — `<log_dir>/train`, `<log_dir>/eval`, as
//! FastEstimator's `TensorBoard` trace does: TensorBoard then shows the modes as runs with the
//! same tags, overlaid; and a tag whose step goes backwards within one file makes TensorBoard
//! discard that tag's later steps (it takes them for the leftovers of a crashed run).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::proto::{frame_record, split_records, Decoder, Encoder, Field};
use crate::error::{Error, Result};

/// The version TensorBoard expects in a file's first event.
pub const FILE_VERSION: &str = "brain.Event:2";

/// Writes scalars to a new TensorBoard event file.
///
/// Events are buffered: call [`flush`](Self::flush) at least at each epoch end so that a running
/// TensorBoard sees them. Dropping the writer flushes too, but cannot report a failure.
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    file: BufWriter<File>,
}

impl EventWriter {
    /// Creates `dir` if needed and a new `events.out.tfevents.<unix secs>.<hostname>` in it,
    /// starting with the file-version event. An existing file is never overwritten: a second
    /// writer in the same second gets a `.1`, `.2`, ... suffix.
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let stem = format!("events.out.tfevents.{}.{}", unix_secs(), hostname());
        let (path, file) = create_new_file(dir, &stem)?;
        let mut writer = Self {
            path,
            file: BufWriter::new(file),
        };
        writer.write_event(&Event {
            wall_time: wall_time(),
            step: 0,
            file_version: Some(FILE_VERSION.to_owned()),
            values: Vec::new(),
        })?;
        Ok(writer)
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records `value` for `tag` at `step` (TensorBoard stores scalars as `f32`).
    pub fn add_scalar(&mut self, tag: &str, step: u64, value: f64) -> Result<()> {
        self.add_scalars(step, [(tag, value)])
    }

    /// Records several scalars at one step, as one event.
    pub fn add_scalars<'t>(
        &mut self,
        step: u64,
        values: impl IntoIterator<Item = (&'t str, f64)>,
    ) -> Result<()> {
        let step = i64::try_from(step).map_err(|_| {
            Error::Internal(format!("step {step} does not fit TensorBoard's int64"))
        })?;
        let values = values
            .into_iter()
            .map(|(tag, value)| SummaryValue {
                tag: tag.to_owned(),
                simple_value: Some(value as f32),
                image: None,
            })
            .collect();
        self.write_event(&Event {
            wall_time: wall_time(),
            step,
            file_version: None,
            values,
        })
    }

    /// Records a PNG-encoded image for `tag` at `step` (TensorBoard's IMAGES tab).
    pub fn add_image(&mut self, tag: &str, step: u64, image: SummaryImage) -> Result<()> {
        let step = i64::try_from(step).map_err(|_| {
            Error::Internal(format!("step {step} does not fit TensorBoard's int64"))
        })?;
        self.write_event(&Event {
            wall_time: wall_time(),
            step,
            file_version: None,
            values: vec![SummaryValue {
                tag: tag.to_owned(),
                simple_value: None,
                image: Some(image),
            }],
        })
    }

    /// Appends any event, as given (for callers that need to control `wall_time`).
    pub fn write_event(&mut self, event: &Event) -> Result<()> {
        self.file
            .write_all(&frame_record(&event.encode()))
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Pushes buffered events to the file.
    pub fn flush(&mut self) -> Result<()> {
        self.file.flush().map_err(|e| Error::io(&self.path, e))
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        // Best effort: a drop cannot report errors; callers who care call `flush` first.
        let _ = self.file.flush();
    }
}

/// One decoded `Event` — the fields fe-host writes; others are skipped on reading.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// The global step.
    pub step: i64,
    /// Set in a file's first event only.
    pub file_version: Option<String>,
    /// The summary's values (empty when the event carries no summary).
    pub values: Vec<SummaryValue>,
}

/// One `Summary.Value`.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryValue {
    /// The series name.
    pub tag: String,
    /// The scalar; `None` for non-scalar values (images, histograms, tensors).
    pub simple_value: Option<f32>,
    /// An image (`Summary.Image`); `None` for other values.
    pub image: Option<SummaryImage>,
}

/// `Summary.Image`: an encoded (PNG) image and its size.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryImage {
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
    /// 1 gray, 2 gray + alpha, 3 RGB, 4 RGBA.
    pub colorspace: u32,
    /// The PNG file's bytes.
    pub encoded: Vec<u8>,
}

impl SummaryImage {
    fn encode(&self) -> Vec<u8> {
        let mut image = Encoder::default();
        image.int64(1, i64::from(self.height));
        image.int64(2, i64::from(self.width));
        image.int64(3, i64::from(self.colorspace));
        image.bytes(4, &self.encoded);
        image.buf
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut image = SummaryImage {
            height: 0,
            width: 0,
            colorspace: 0,
            encoded: Vec::new(),
        };
        let mut fields = Decoder::new(bytes);
        while let Some((number, field)) = fields.next_field()? {
            match (number, field) {
                (1, Field::Varint(v)) => image.height = v as u32,
                (2, Field::Varint(v)) => image.width = v as u32,
                (3, Field::Varint(v)) => image.colorspace = v as u32,
                (4, Field::Len(png)) => image.encoded = png.to_vec(),
                (1..=4, other) => {
                    return Err(format!(
                        "Summary.Image field {number} has the wrong wire type ({other:?})"
                    ))
                }
                _ => {}
            }
        }
        Ok(image)
    }
}

impl Event {
    /// The protobuf encoding: `Event { wall_time = 1; step = 2; file_version = 3; summary = 5 }`.
    pub fn encode(&self) -> Vec<u8> {
        let mut event = Encoder::default();
        event.double(1, self.wall_time);
        event.int64(2, self.step);
        if let Some(version) = &self.file_version {
            event.bytes(3, version.as_bytes());
        }
        if !self.values.is_empty() {
            let mut summary = Encoder::default();
            for value in &self.values {
                let mut encoded = Encoder::default();
                encoded.bytes(1, value.tag.as_bytes());
                if let Some(simple) = value.simple_value {
                    encoded.float(2, simple);
                }
                if let Some(image) = &value.image {
                    encoded.bytes(4, &image.encode());
                }
                summary.bytes(1, &encoded.buf);
            }
            event.bytes(5, &summary.buf);
        }
        event.buf
    }

    /// Decodes one event, skipping fields fe-host does not use.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut event = Event {
            wall_time: 0.0,
            step: 0,
            file_version: None,
            values: Vec::new(),
        };
        let mut fields = Decoder::new(bytes);
        while let Some((number, field)) = fields.next_field()? {
            match (number, field) {
                (1, Field::Fixed64(bits)) => event.wall_time = f64::from_bits(bits),
                (2, Field::Varint(raw)) => event.step = raw as i64,
                (3, Field::Len(text)) => event.file_version = Some(utf8(text, "file_version")?),
                (5, Field::Len(summary)) => decode_summary(summary, &mut event.values)?,
                (1 | 2 | 3 | 5, other) => {
                    return Err(format!(
                        "Event field {number} has the wrong wire type ({other:?})"
                    ))
                }
                _ => {}
            }
        }
        Ok(event)
    }
}

fn decode_summary(bytes: &[u8], values: &mut Vec<SummaryValue>) -> Result<(), String> {
    let mut fields = Decoder::new(bytes);
    while let Some((number, field)) = fields.next_field()? {
        match (number, field) {
            (1, Field::Len(value)) => values.push(decode_value(value)?),
            (1, other) => return Err(format!("Summary.value has the wrong wire type ({other:?})")),
            _ => {}
        }
    }
    Ok(())
}

fn decode_value(bytes: &[u8]) -> Result<SummaryValue, String> {
    let mut value = SummaryValue {
        tag: String::new(),
        simple_value: None,
        image: None,
    };
    let mut fields = Decoder::new(bytes);
    while let Some((number, field)) = fields.next_field()? {
        match (number, field) {
            (1, Field::Len(tag)) => value.tag = utf8(tag, "tag")?,
            (2, Field::Fixed32(bits)) => value.simple_value = Some(f32::from_bits(bits)),
            (4, Field::Len(image)) => value.image = Some(SummaryImage::decode(image)?),
            (1 | 2 | 4, other) => {
                return Err(format!(
                    "Summary.Value field {number} has the wrong wire type ({other:?})"
                ))
            }
            _ => {}
        }
    }
    Ok(value)
}

fn utf8(bytes: &[u8], what: &str) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
}

/// Reads every event of an event file, verifying both checksums of every record. Errors name the
/// file and the offset of the bad record.
pub fn read_events(path: &Path) -> Result<Vec<Event>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    split_records(&bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .into_iter()
        .map(|(offset, data)| {
            Event::decode(data)
                .map_err(|e| format!("{}: record at offset {offset}: {e}", path.display()))
        })
        .collect()
}

fn create_new_file(dir: &Path, stem: &str) -> Result<(PathBuf, File)> {
    for attempt in 0u32.. {
        let name = match attempt {
            0 => stem.to_owned(),
            n => format!("{stem}.{n}"),
        };
        let path = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && attempt < 10_000 => continue,
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Err(Error::Internal("no free event-file name".into()))
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn wall_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The host name, made safe for a file name; `fe-host` when there is none.
pub fn hostname() -> String {
    sanitize_hostname(&raw_hostname())
}

#[cfg(unix)]
fn raw_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

#[cfg(not(unix))]
fn raw_hostname() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_default()
}

fn sanitize_hostname(raw: &str) -> String {
    let clean: String = raw
        .trim()
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    // Only separators left means nothing identifying is left.
    if clean.chars().all(|c| matches!(c, '.' | '_' | '-')) {
        "fe-host".to_owned()
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_dir::TestDir;

    fn scalars(events: &[Event]) -> Vec<(i64, String, f32)> {
        events
            .iter()
            .flat_map(|e| {
                e.values
                    .iter()
                    .map(move |v| (e.step, v.tag.clone(), v.simple_value.unwrap_or(f32::NAN)))
            })
            .collect()
    }

    #[test]
    fn scalars_round_trip_through_an_event_file() {
        let dir = TestDir::new("tb-round-trip");
        let mut writer = EventWriter::create(&dir.path().join("eval")).unwrap();
        writer.add_scalar("accuracy", 125, 0.875).unwrap();
        writer
            .add_scalars(250, [("accuracy", 0.9375), ("ce", -1.5)])
            .unwrap();
        writer.add_scalar("ce", 1 << 40, 0.0).unwrap();
        writer.flush().unwrap();
        let path = writer.path().to_owned();
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("events.out.tfevents."), "{name}");
        assert_eq!(name.split('.').count(), 4 + hostname().split('.').count());

        let events = read_events(&path).unwrap();
        assert_eq!(events.len(), 4);
        assert_eq!(events[0].file_version.as_deref(), Some(FILE_VERSION));
        assert!(events[0].values.is_empty());
        assert!(events.iter().all(|e| e.wall_time > 1.6e9));
        assert_eq!(
            scalars(&events),
            [
                (125, "accuracy".to_owned(), 0.875),
                (250, "accuracy".to_owned(), 0.9375),
                (250, "ce".to_owned(), -1.5),
                (1 << 40, "ce".to_owned(), 0.0),
            ]
        );
    }

    #[test]
    fn the_writer_flushes_on_drop_and_never_overwrites() {
        let dir = TestDir::new("tb-drop");
        let first = {
            let mut writer = EventWriter::create(dir.path()).unwrap();
            writer.add_scalar("ce", 1, 2.0).unwrap();
            writer.path().to_owned()
        };
        let second = EventWriter::create(dir.path()).unwrap().path().to_owned();
        assert_ne!(first, second);
        assert_eq!(
            scalars(&read_events(&first).unwrap()),
            [(1, "ce".to_owned(), 2.0)]
        );
        assert_eq!(read_events(&second).unwrap().len(), 1);
    }

    #[test]
    fn a_flipped_byte_is_reported_with_its_record_offset() {
        let dir = TestDir::new("tb-corrupt");
        let mut writer = EventWriter::create(dir.path()).unwrap();
        writer.add_scalar("ce", 7, 0.5).unwrap();
        writer.flush().unwrap();
        let path = writer.path().to_owned();
        let mut bytes = std::fs::read(&path).unwrap();
        let first_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let second_record = 12 + first_len + 4;
        let last = bytes.len() - 5; // inside the second record's data
        bytes[last] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let error = read_events(&path).unwrap_err();
        assert!(error.starts_with(&path.display().to_string()), "{error}");
        assert!(
            error.contains(&format!(
                "record at offset {second_record}: data checksum mismatch"
            )),
            "{error}"
        );
    }

    #[test]
    fn events_with_unknown_and_foreign_fields_decode() {
        let mut enc = Encoder::default();
        enc.double(1, 12.5);
        enc.int64(2, -1);
        enc.bytes(6, b"a log message we do not read");
        let mut value = Encoder::default();
        value.bytes(1, b"histogram");
        // Summary.Value.histo (field 5): a kind of value fe-host does not read.
        value.bytes(5, b"histogram bytes");
        let mut summary = Encoder::default();
        summary.bytes(1, &value.buf);
        enc.bytes(5, &summary.buf);
        let event = Event::decode(&enc.buf).unwrap();
        assert_eq!(event.step, -1);
        assert_eq!(event.wall_time, 12.5);
        assert_eq!(
            event.values,
            [SummaryValue {
                tag: "histogram".into(),
                simple_value: None,
                image: None,
            }]
        );
        let mut wrong = Encoder::default();
        wrong.bytes(2, b"step as a string");
        assert!(Event::decode(&wrong.buf).unwrap_err().contains("field 2"));
    }

    #[test]
    fn host_names_are_sanitized() {
        assert_eq!(
            sanitize_hostname("gpu-node7.example.org"),
            "gpu-node7.example.org"
        );
        assert_eq!(sanitize_hostname("a b/c"), "a_b_c");
        assert_eq!(sanitize_hostname(""), "fe-host");
        assert_eq!(sanitize_hostname("/"), "fe-host");
        assert!(!hostname().is_empty());
    }

    /// Opt-in (`FE_TEST_TENSORBOARD=1`): TensorBoard's own reader must accept our files, and ours
    /// must accept files written by TensorBoard's Python writer.
    #[test]
    fn tensorboard_python_reads_our_files_and_we_read_its_files() {
        if std::env::var("FE_TEST_TENSORBOARD").as_deref() != Ok("1") {
            eprintln!("skipped: set FE_TEST_TENSORBOARD=1 (needs the tensorboard Python package)");
            return;
        }
        let dir = TestDir::new("tb-python");
        let ours = dir.path().join("ours");
        let mut writer = EventWriter::create(&ours).unwrap();
        for step in 1..=3u64 {
            writer
                .add_scalar("train/ce", step * 10, 1.0 / step as f64)
                .unwrap();
        }
        writer.add_scalars(30, [("eval/accuracy", 0.75)]).unwrap();
        writer.flush().unwrap();
        let theirs = dir.path().join("theirs");
        let script = r#"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
acc = EventAccumulator(sys.argv[1]); acc.Reload()
for tag in sorted(acc.Tags()["scalars"]):
    for s in acc.Scalars(tag):
        print(f"{tag} {s.step} {s.value!r}")
w = EventFileWriter(sys.argv[2])
for step, value in [(5, 0.5), (6, -2.25)]:
    v = summary_pb2.Summary.Value(tag="loss", simple_value=value)
    w.add_event(event_pb2.Event(step=step, wall_time=1.0, summary=summary_pb2.Summary(value=[v])))
w.close()
"#;
        // The project's virtual environment (scripts/setup.sh), else whatever python3 is.
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
        let python = if venv.exists() {
            venv
        } else {
            PathBuf::from("python3")
        };
        let out = std::process::Command::new(python)
            .args(["-c", script])
            .arg(&ours)
            .arg(&theirs)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            stdout.lines().collect::<Vec<_>>(),
            [
                "eval/accuracy 30 0.75",
                "train/ce 10 1.0",
                "train/ce 20 0.5",
                &format!("train/ce 30 {:?}", (1.0f64 / 3.0) as f32 as f64),
            ]
        );
        let file = std::fs::read_dir(&theirs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let events = read_events(&file).unwrap();
        assert_eq!(events[0].file_version.as_deref(), Some(FILE_VERSION));
        assert_eq!(
            scalars(&events),
            [(5, "loss".to_owned(), 0.5), (6, "loss".to_owned(), -2.25)]
        );
    }
}
