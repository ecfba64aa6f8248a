//! The wire formats under TensorBoard event files: CRC32C, TFRecord framing and the protobuf
//! encoding, by hand — the few message types we write do not justify a protobuf toolchain.

/// CRC32C (Castagnoli, reflected polynomial `0x82F63B78`) lookup table, built at compile time.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// The CRC32C checksum of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc = CRC32C_TABLE[((crc ^ byte as u32) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The checksum TFRecord stores: masked because a CRC of data that itself embeds CRCs is weak.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Frames `data` as one TFRecord: length, masked CRC of the length, data, masked CRC of the data.
pub fn frame_record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    out
}

/// Splits a TFRecord file into its records' payloads, each with the offset its record starts at.
/// Both checksums are verified: a file that does not check out is rejected, not half-read.
pub fn split_records(bytes: &[u8]) -> Result<Vec<(usize, &[u8])>, String> {
    let mut records = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let start = pos;
        let header = bytes
            .get(pos..pos + 12)
            .ok_or_else(|| format!("record at offset {start}: truncated header"))?;
        let (len_bytes, len_crc) = header.split_at(8);
        if masked_crc32c(len_bytes) != le_u32(len_crc) {
            return Err(format!(
                "record at offset {start}: length checksum mismatch"
            ));
        }
        let len = usize::try_from(u64::from_le_bytes(array(len_bytes)))
            .map_err(|_| format!("record at offset {start}: length does not fit in memory"))?;
        pos += 12;
        let end = pos
            .checked_add(len)
            .filter(|&end| end.saturating_add(4) <= bytes.len())
            .ok_or_else(|| format!("record at offset {start}: truncated ({len} bytes declared)"))?;
        let data = &bytes[pos..end];
        if masked_crc32c(data) != le_u32(&bytes[end..end + 4]) {
            return Err(format!("record at offset {start}: data checksum mismatch"));
        }
        records.push((start, data));
        pos = end + 4;
    }
    Ok(records)
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(array(bytes))
}

/// The first `N` bytes as an array; callers have checked the length.
fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

/// Protobuf wire types we write or must be able to skip.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const GROUP_START: u32 = 3;
const GROUP_END: u32 = 4;
const FIXED32: u32 = 5;

/// Appends protobuf fields to a buffer.
#[derive(Debug, Default)]
pub struct Encoder {
    /// The encoded message so far.
    pub buf: Vec<u8>,
}

impl Encoder {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.buf.push((value as u8 & 0x7F) | 0x80);
            value >>= 7;
        }
        self.buf.push(value as u8);
    }

    fn key(&mut self, field: u32, wire: u32) {
        self.varint(((field as u64) << 3) | wire as u64);
    }

    /// An `int64` field (negative values take ten bytes, as protobuf specifies).
    pub fn int64(&mut self, field: u32, value: i64) {
        self.key(field, VARINT);
        self.varint(value as u64);
    }

    /// A `double` field.
    pub fn double(&mut self, field: u32, value: f64) {
        self.key(field, FIXED64);
        self.buf.extend_from_slice(&value.to_le_bytes());
    }

    /// A `float` field.
    pub fn float(&mut self, field: u32, value: f32) {
        self.key(field, FIXED32);
        self.buf.extend_from_slice(&value.to_le_bytes());
    }

    /// A `string`, `bytes` or embedded-message field.
    pub fn bytes(&mut self, field: u32, value: &[u8]) {
        self.key(field, LEN);
        self.varint(value.len() as u64);
        self.buf.extend_from_slice(value);
    }
}

/// One decoded field's payload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Field<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: strings, bytes, embedded messages, packed repeated fields.
    Len(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
    /// A (deprecated) group, skipped whole.
    Group,
}

/// Iterates over a message's fields, in wire order.
#[derive(Debug)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder over one encoded message.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// The next `(field number, payload)`, or `None` at the end of the message.
    pub fn next_field(&mut self) -> Result<Option<(u32, Field<'a>)>, String> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let (field, wire) = self.key()?;
        if wire == GROUP_END {
            return Err(format!("byte {}: unmatched end-group", self.pos));
        }
        Ok(Some((field, self.payload(field, wire)?)))
    }

    fn key(&mut self) -> Result<(u32, u32), String> {
        let at = self.pos;
        let key = self.varint()?;
        let field =
            u32::try_from(key >> 3).map_err(|_| format!("byte {at}: field number overflows"))?;
        if field == 0 {
            return Err(format!("byte {at}: field number 0"));
        }
        Ok((field, (key & 7) as u32))
    }

    fn payload(&mut self, field: u32, wire: u32) -> Result<Field<'a>, String> {
        Ok(match wire {
            VARINT => Field::Varint(self.varint()?),
            FIXED64 => Field::Fixed64(u64::from_le_bytes(array(self.take(8)?))),
            LEN => {
                let len = self.varint()?;
                let len = usize::try_from(len)
                    .map_err(|_| format!("byte {}: length overflows", self.pos))?;
                Field::Len(self.take(len)?)
            }
            FIXED32 => Field::Fixed32(le_u32(self.take(4)?)),
            GROUP_START => {
                // A group has no length prefix: its end is the matching end-group key.
                loop {
                    if self.pos >= self.buf.len() {
                        return Err(format!("group {field}: missing end-group"));
                    }
                    let (inner, inner_wire) = self.key()?;
                    if inner_wire == GROUP_END {
                        if inner != field {
                            return Err(format!("group {field} closed as group {inner}"));
                        }
                        break;
                    }
                    self.payload(inner, inner_wire)?;
                }
                Field::Group
            }
            other => return Err(format!("byte {}: invalid wire type {other}", self.pos)),
        })
    }

    fn varint(&mut self) -> Result<u64, String> {
        let at = self.pos;
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| format!("byte {at}: truncated varint"))?;
            self.pos += 1;
            value |= ((byte & 0x7F) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("byte {at}: varint longer than ten bytes"))
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let at = self.pos;
        let end = at
            .checked_add(len)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| format!("byte {at}: field runs past the end of the message"))?;
        self.pos = end;
        Ok(&self.buf[at..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_published_test_vectors() {
        // The check value of the CRC catalogue, then RFC 3720 (iSCSI) appendix B.4.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
        let descending: Vec<u8> = (0..32).rev().collect();
        assert_eq!(crc32c(&descending), 0x113F_DB5C);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn masked_checksums_match_tensorboards() {
        // Values from tensorboard's own `masked_crc32c` (tensorflow_stub).
        assert_eq!(masked_crc32c(b"123456789"), 0xC78A_B0E5);
        assert_eq!(masked_crc32c(&0u64.to_le_bytes()), 0x0798_0329);
        assert_eq!(masked_crc32c(b""), 0xA282_EAD8);
    }

    #[test]
    fn records_round_trip_and_report_their_offsets() {
        let mut file = frame_record(b"first");
        file.extend(frame_record(b""));
        file.extend(frame_record(b"third record"));
        let records = split_records(&file).unwrap();
        let payloads: Vec<&[u8]> = records.iter().map(|(_, data)| *data).collect();
        assert_eq!(payloads, [&b"first"[..], b"", b"third record"]);
        assert_eq!(
            records.iter().map(|(at, _)| *at).collect::<Vec<_>>(),
            [0, 21, 37]
        );
    }

    #[test]
    fn every_corrupted_byte_is_detected() {
        let mut file = frame_record(b"payload");
        file.extend(frame_record(b"second"));
        for at in 0..file.len() {
            let mut bad = file.clone();
            bad[at] ^= 0x10;
            let error = split_records(&bad).unwrap_err();
            let record = if at < 23 { 0 } else { 23 };
            assert!(
                error.starts_with(&format!("record at offset {record}:")),
                "byte {at}: {error}"
            );
        }
        let truncated = &file[..file.len() - 1];
        assert!(split_records(truncated)
            .unwrap_err()
            .contains("offset 23: truncated"));
    }

    #[test]
    fn fields_round_trip_and_unknown_wire_types_are_skipped() {
        let mut enc = Encoder::default();
        enc.int64(2, -3);
        enc.double(1, 1.5);
        enc.float(9, 0.25);
        enc.bytes(3, b"tag");
        // An unknown group holding a varint and a nested length-delimited field.
        enc.buf.extend_from_slice(&[
            (7 << 3) | 3,
            1 << 3,
            42,
            (2 << 3) | 2,
            1,
            b'x',
            (7 << 3) | 4,
        ]);
        enc.int64(4, i64::MAX);
        let mut dec = Decoder::new(&enc.buf);
        let mut fields = Vec::new();
        while let Some(field) = dec.next_field().unwrap() {
            fields.push(field);
        }
        assert_eq!(
            fields,
            [
                (2, Field::Varint(-3i64 as u64)),
                (1, Field::Fixed64(1.5f64.to_bits())),
                (9, Field::Fixed32(0.25f32.to_bits())),
                (3, Field::Len(b"tag")),
                (7, Field::Group),
                (4, Field::Varint(i64::MAX as u64)),
            ]
        );
    }

    #[test]
    fn malformed_messages_are_errors() {
        for (bytes, expected) in [
            (&[0x08, 0x80][..], "truncated varint"),
            (&[0x12, 0x05, b'a'][..], "runs past the end"),
            (&[0x0F][..], "invalid wire type 7"),
            (&[0x00][..], "field number 0"),
            (&[0x1B, 0x08, 0x01][..], "missing end-group"),
            (&[0x1C][..], "unmatched end-group"),
        ] {
            let mut dec = Decoder::new(bytes);
            let error = loop {
                match dec.next_field() {
                    Ok(Some(_)) => continue,
                    Ok(None) => panic!("{bytes:?} decoded"),
                    Err(error) => break error,
                }
            };
            assert!(error.contains(expected), "{bytes:?}: {error}");
        }
    }
}
