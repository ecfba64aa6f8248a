//! Arrow values → tensors, one row of one column at a time.
//!
//! * integers and floats → a scalar of that dtype (uint16/uint32 widen to int32/int64: torch
//!   has no such unsigned dtypes; uint64 is refused, int64 cannot hold all of it);
//! * booleans → a bool scalar (as numpy's `b1` arrays read);
//! * strings → text (a 1-D uint8 tensor of the UTF-8 bytes, as CSV text and WebDataset `.txt`);
//! * binary → its bytes as a 1-D uint8 tensor (as WebDataset hands `.jpg`/`.png` members to
//!   `ReadImage`);
//! * lists (variable or fixed size) of numbers or booleans → a 1-D tensor; lists of such
//!   lists → N-D when every inner list of a row has the same length.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use tch::{Kind, Tensor};

/// `Ok` when a column of type `data_type` can be read; otherwise why not.
pub fn check(data_type: &DataType) -> Result<(), String> {
    use DataType::*;
    let supported = match data_type {
        List(item) | LargeList(item) | FixedSizeList(item, _) => element(item.data_type()),
        other => scalar(other) || text_or_bytes(other),
    };
    if supported {
        return Ok(());
    }
    let hint = match data_type {
        UInt64 => " (int64 cannot hold every uint64: cast it to int64 before writing)",
        Dictionary(..) => " (a dictionary-encoded column: cast it to its value type)",
        _ => "",
    };
    Err(format!(
        "type {data_type} is not one fe-host reads{hint}; it reads integers, floats, booleans, strings, binary and (nested) lists of numbers"
    ))
}

fn scalar(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(
        data_type,
        Int8 | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | Float16
            | Float32
            | Float64
            | Boolean
    )
}

fn text_or_bytes(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(
        data_type,
        Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_)
    )
}

/// What a list may hold: numbers, booleans, or lists of them.
fn element(data_type: &DataType) -> bool {
    use DataType::*;
    match data_type {
        List(item) | LargeList(item) | FixedSizeList(item, _) => element(item.data_type()),
        other => scalar(other),
    }
}

/// Row `row` of `column` as a tensor; the column has no null at `row` (checked on load).
pub fn value(column: &ArrayRef, row: usize) -> Result<Tensor, String> {
    use DataType::*;
    Ok(match column.data_type() {
        Utf8 => fe_plugin_api::text_tensor(column.as_string::<i32>().value(row)),
        LargeUtf8 => fe_plugin_api::text_tensor(column.as_string::<i64>().value(row)),
        Utf8View => fe_plugin_api::text_tensor(column.as_string_view().value(row)),
        Binary => Tensor::from_slice(column.as_binary::<i32>().value(row)),
        LargeBinary => Tensor::from_slice(column.as_binary::<i64>().value(row)),
        BinaryView => Tensor::from_slice(column.as_binary_view().value(row)),
        FixedSizeBinary(_) => Tensor::from_slice(column.as_fixed_size_binary().value(row)),
        List(_) | LargeList(_) | FixedSizeList(..) => array(&list_item(column, row)?)?,
        _ => numbers(&column.slice(row, 1))?
            .f_squeeze_dim(0)
            .map_err(crate::tch_message)?,
    })
}

/// Row `row` of a list column: its items.
fn list_item(column: &ArrayRef, row: usize) -> Result<ArrayRef, String> {
    use DataType::*;
    Ok(match column.data_type() {
        List(_) => column.as_list::<i32>().value(row),
        LargeList(_) => column.as_list::<i64>().value(row),
        FixedSizeList(..) => column.as_fixed_size_list().value(row),
        other => return Err(format!("internal error: {other} is not a list")),
    })
}

/// A list's items as a tensor: 1-D for numbers, N-D for lists of equally long lists.
fn array(items: &ArrayRef) -> Result<Tensor, String> {
    if items.null_count() > 0 {
        return Err("a list holds a null (fe-host reads no missing values)".into());
    }
    if !matches!(
        items.data_type(),
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
    ) {
        return numbers(items);
    }
    let mut rows = Vec::with_capacity(items.len());
    for i in 0..items.len() {
        rows.push(array(&list_item(items, i)?)?);
    }
    if let Some(first) = rows.first() {
        if let Some(odd) = rows.iter().find(|r| r.size() != first.size()) {
            return Err(format!(
                "nested lists of different lengths ({:?} and {:?}) make no N-D array",
                first.size(),
                odd.size()
            ));
        }
        return Tensor::f_stack(&rows, 0).map_err(crate::tch_message);
    }
    Ok(Tensor::empty([0], (Kind::Float, tch::Device::Cpu)))
}

/// A 1-D tensor of a numeric or boolean array's values (no nulls).
fn numbers(values: &ArrayRef) -> Result<Tensor, String> {
    use DataType::*;
    let tensor = match values.data_type() {
        Int8 => Tensor::f_from_slice(&values.as_primitive::<Int8Type>().values()[..]),
        Int16 => Tensor::f_from_slice(&values.as_primitive::<Int16Type>().values()[..]),
        Int32 => Tensor::f_from_slice(&values.as_primitive::<Int32Type>().values()[..]),
        Int64 => Tensor::f_from_slice(&values.as_primitive::<Int64Type>().values()[..]),
        UInt8 => Tensor::f_from_slice(&values.as_primitive::<UInt8Type>().values()[..]),
        UInt16 => {
            let wide: Vec<i32> = values
                .as_primitive::<UInt16Type>()
                .values()
                .iter()
                .map(|&v| i32::from(v))
                .collect();
            Tensor::f_from_slice(&wide[..])
        }
        UInt32 => {
            let wide: Vec<i64> = values
                .as_primitive::<UInt32Type>()
                .values()
                .iter()
                .map(|&v| i64::from(v))
                .collect();
            Tensor::f_from_slice(&wide[..])
        }
        Float16 => {
            let wide: Vec<f32> = values
                .as_primitive::<Float16Type>()
                .values()
                .iter()
                .map(|v| v.to_f32())
                .collect();
            Tensor::f_from_slice(&wide[..]).and_then(|t| t.f_to_kind(Kind::Half))
        }
        Float32 => Tensor::f_from_slice(&values.as_primitive::<Float32Type>().values()[..]),
        Float64 => Tensor::f_from_slice(&values.as_primitive::<Float64Type>().values()[..]),
        Boolean => {
            let flags: Vec<bool> = values.as_boolean().values().iter().collect();
            Tensor::f_from_slice(&flags[..])
        }
        other => return Err(format!("internal error: {other} values are not numbers")),
    };
    tensor.map_err(crate::tch_message)
}

/// The first null of `column` (a row of the batch), if any: top-level nulls only; a null
/// inside a list is found when that row is read.
pub fn first_null(column: &ArrayRef) -> Option<usize> {
    if column.null_count() == 0 {
        return None;
    }
    (0..column.len()).find(|&i| column.is_null(i))
}
