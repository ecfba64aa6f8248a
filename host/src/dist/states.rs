//! Component states as bytes, so that the ranks can gather them (a metric's partial state,
//! for its `cross_slot_reduce`).

use fe_plugin_api::State;
use tch::Tensor;

/// A component state as bytes: the JSON's length (8 bytes, little-endian), the JSON, then its
/// tensors as safetensors.
pub fn encode_state(state: &State) -> Result<Vec<u8>, String> {
    let json = state.json_text().as_bytes();
    let tensors: Vec<(String, Tensor)> = state
        .tensors()
        .iter()
        .map(|(name, tensor)| Ok((name.clone(), tensor.f_to_device(tch::Device::Cpu)?)))
        .collect::<Result<_, tch::TchError>>()
        .map_err(crate::tch_message)?;
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json);
    if !tensors.is_empty() {
        out.extend(crate::system::tensors::serialize(&tensors)?);
    }
    Ok(out)
}

/// The inverse of [`encode_state`].
pub fn decode_state(bytes: &[u8]) -> Result<State, String> {
    let malformed = || "a gathered component state is malformed".to_owned();
    let (length, rest) = bytes.split_at_checked(8).ok_or_else(malformed)?;
    let length = u64::from_le_bytes(length.try_into().map_err(|_| malformed())?) as usize;
    let (json, tensors) = rest.split_at_checked(length).ok_or_else(malformed)?;
    let json = String::from_utf8(json.to_vec()).map_err(|_| malformed())?;
    let tensors = if tensors.is_empty() {
        Vec::new()
    } else {
        crate::system::tensors::deserialize(tensors)?
    };
    Ok(State::from_parts(json, tensors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_survives_encoding() {
        let state = State::from_parts(
            r#"{"correct":3}"#.to_owned(),
            vec![(
                "matrix".to_owned(),
                Tensor::from_slice(&[1i64, 2, 3, 4]).reshape([2, 2]),
            )],
        );
        let back = decode_state(&encode_state(&state).unwrap()).unwrap();
        assert_eq!(back.json_text(), r#"{"correct":3}"#);
        assert_eq!(back.tensors()[0].0, "matrix");
        assert_eq!(back.tensors()[0].1, state.tensors()[0].1);
        let empty = decode_state(&encode_state(&State::empty()).unwrap()).unwrap();
        assert!(empty.is_empty());
        assert!(decode_state(&[1, 2]).is_err());
    }
}
