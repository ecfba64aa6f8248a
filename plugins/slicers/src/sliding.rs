//! FastEstimator's `SlidingSlicer`.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, Slicer};
use serde::Deserialize;

use crate::no_slices;

/// What to do where the windows do not tile an axis exactly.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum PadMode {
    /// Drop the last window along an axis when it would run past the end.
    #[default]
    Drop,
    /// Keep the last window along an axis, cut short at the end (it is smaller than the
    /// others).
    Partial,
    /// Pad the end of the axis with `pad_val` so the last window is full-sized.
    Constant,
    /// Shift the last window back so that it ends at the end of the axis: every window is
    /// full-sized and the last two overlap. Every slid axis must be at least as long as the
    /// window.
    #[serde(rename = "nopad")]
    NoPad,
    /// Pad the end of every axis from the third on (axes 0 and 1 are batch and channel) by
    /// reflection, excluding the edge (`torch.nn.functional.pad(..., mode="reflect")`).
    /// Axes 0 and 1 are not padded; a window running past their end is cut short.
    Mirror,
}

/// How overlapping windows are combined when unslicing.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum UnsliceMode {
    /// Add the overlapping values (the result keeps the minibatches' kind).
    Sum,
    /// Average the overlapping values (the result is `float32`, or `float64` for `float64`
    /// minibatches).
    #[default]
    Avg,
}

/// `strides`: one value for every slid axis, or one per axis.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(untagged, expecting = "an integer or a list of integers")]
pub enum Strides {
    /// The same stride on every axis whose window size is positive (0 where it is -1).
    One(i64),
    /// One stride per axis; an empty list means "equal to the window size".
    PerAxis(Vec<i64>),
}

/// `SlidingSlicer` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct SlidingSlicerConfig {
    /// The window's size on every axis of the input (same rank as the input); `-1` copies the
    /// input's length on that axis (the axis is not slid).
    pub window_size: Vec<i64>,
    /// How far the window moves on each axis: one integer for every axis whose window size is
    /// positive, or one per axis (0 where `window_size` is -1, and 0 also means "do not slide
    /// this axis"). Smaller than the window gives overlapping windows, larger skips data.
    /// An axis whose stride is at least its length is not slid either: the window spans the
    /// whole axis (padded up to the window size in `constant`/`mirror` mode), as in
    /// FastEstimator. Default: equal to `window_size` (no overlap).
    #[serde(default)]
    pub strides: Option<Strides>,
    /// `drop`, `partial`, `constant`, `nopad` or `mirror`: what to do where the windows do not
    /// tile an axis (see the README). Default `drop`.
    #[serde(default)]
    pub pad_mode: PadMode,
    /// The value `constant` mode pads with; unslicing also fills every position no window
    /// covered with it. Default 0.
    #[serde(default)]
    pub pad_val: f64,
    /// `avg` (default) or `sum`: how unslicing combines overlapping windows.
    #[serde(default)]
    pub unslice_mode: UnsliceMode,
    /// The shape unsliced values take. Required when the slicer has `unslice` keys but no
    /// `slice` keys; otherwise the shape of the last input sliced is used. Axes whose stride
    /// is 0 take their length from the minibatches instead, and may be given as -1.
    #[serde(default)]
    pub unslice_shape: Option<Vec<i64>>,
    /// Remove the axes whose window size is 1 from every minibatch (e.g. to feed slices of a
    /// 3D volume to a 2D model) and re-insert them when unslicing. Default `false`.
    #[serde(default)]
    pub squeeze_window: bool,
}

/// Cuts every `slice` key into sliding windows and joins every `unslice` key back into the
/// shape of the input by summing or averaging the windows where they overlap.
///
/// The windows are enumerated in row-major order of their positions (axis 0 slowest). The
/// slicer remembers the shape of the last input it sliced and unslices to that shape, so
/// the `slice` keys are expected to share their shape on the slid axes.
#[derive(Debug)]
pub struct SlidingSlicer {
    window: Vec<i64>,
    strides: Vec<i64>,
    pad_mode: PadMode,
    pad_val: f64,
    unslice_mode: UnsliceMode,
    static_shape: Option<Vec<i64>>,
    squeeze_axes: Vec<usize>,
    last_shape: Option<Vec<i64>>,
}

/// The windows for one input shape.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    /// The shape after padding.
    padded: Vec<i64>,
    /// Padding added at the end of each axis.
    pads: Vec<i64>,
    /// The window positions along each axis, as `(start, stop)` into the padded input.
    positions: Vec<Vec<(i64, i64)>>,
}

impl Plan {
    /// Every window, as one `(start, stop)` per axis, axis 0 slowest.
    fn cuts(&self) -> Vec<Vec<(i64, i64)>> {
        let mut cuts: Vec<Vec<(i64, i64)>> = vec![Vec::new()];
        for axis_positions in &self.positions {
            let mut next = Vec::with_capacity(cuts.len() * axis_positions.len());
            for prefix in &cuts {
                for &position in axis_positions {
                    let mut cut = prefix.clone();
                    cut.push(position);
                    next.push(cut);
                }
            }
            cuts = next;
        }
        cuts
    }

    /// The part of `tensor` (of shape `padded`) under `cut`.
    fn narrow(&self, tensor: &Tensor, cut: &[(i64, i64)]) -> Result<Tensor> {
        let mut view = tensor.shallow_clone();
        for (axis, (&(start, stop), &length)) in cut.iter().zip(&self.padded).enumerate() {
            if start != 0 || stop != length {
                view = view.f_narrow(axis as i64, start, stop - start)?;
            }
        }
        Ok(view)
    }
}

impl FromConfig for SlidingSlicer {
    type Config = SlidingSlicerConfig;

    fn from_config(config: SlidingSlicerConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let window = config.window_size;
        if window.is_empty() {
            return Err(Error::config(
                "window_size",
                "must give the window's size on every axis of the input",
            ));
        }
        for (axis, &size) in window.iter().enumerate() {
            if size < 1 && size != -1 {
                return Err(Error::config(
                    format!("window_size[{axis}]"),
                    format!("must be positive or -1, got {size}"),
                ));
            }
        }
        let default_strides = || window.iter().map(|&w| w.max(0)).collect::<Vec<i64>>();
        let strides = match config.strides {
            None => default_strides(),
            Some(Strides::One(stride)) => {
                if stride < 0 {
                    return Err(Error::config(
                        "strides",
                        format!("must not be negative, got {stride}"),
                    ));
                }
                window
                    .iter()
                    .map(|&w| if w > 0 { stride } else { 0 })
                    .collect()
            }
            Some(Strides::PerAxis(strides)) if strides.is_empty() => default_strides(),
            Some(Strides::PerAxis(strides)) => {
                if strides.len() != window.len() {
                    return Err(Error::config(
                        "strides",
                        format!(
                            "must have one stride per axis of window_size ({}), got {}",
                            window.len(),
                            strides.len()
                        ),
                    ));
                }
                for (axis, (&stride, &size)) in strides.iter().zip(&window).enumerate() {
                    if stride < 0 {
                        return Err(Error::config(
                            format!("strides[{axis}]"),
                            format!("must not be negative, got {stride}"),
                        ));
                    }
                    if size == -1 && stride != 0 {
                        return Err(Error::config(
                            format!("strides[{axis}]"),
                            format!(
                                "must be 0 where window_size is -1 (the window spans the \
                                 whole axis), got {stride}"
                            ),
                        ));
                    }
                }
                strides
            }
        };
        if config.pad_mode == PadMode::Mirror && window.len() < 3 {
            return Err(Error::config(
                "pad_mode",
                "`mirror` pads the axes after batch and channel, so window_size needs at \
                 least 3 axes",
            ));
        }
        if let Some(shape) = &config.unslice_shape {
            if shape.len() != window.len() {
                return Err(Error::config(
                    "unslice_shape",
                    format!(
                        "must have the rank of window_size ({}), got {} axes",
                        window.len(),
                        shape.len()
                    ),
                ));
            }
            for (axis, (&length, &stride)) in shape.iter().zip(&strides).enumerate() {
                if length < 1 && !(length == -1 && stride == 0) {
                    return Err(Error::config(
                        format!("unslice_shape[{axis}]"),
                        format!("must be positive (or -1 where the stride is 0), got {length}"),
                    ));
                }
            }
        }
        if ctx.inputs.is_empty() && !ctx.outputs.is_empty() && config.unslice_shape.is_none() {
            return Err(Error::config(
                "unslice_shape",
                "a SlidingSlicer that unslices without slicing needs `unslice_shape`, the \
                 shape of the values it reconstructs",
            ));
        }
        let squeeze_axes = if config.squeeze_window {
            window
                .iter()
                .enumerate()
                .filter(|&(_, &size)| size == 1)
                .map(|(axis, _)| axis)
                .collect()
        } else {
            Vec::new()
        };
        Ok(Self {
            window,
            strides,
            pad_mode: config.pad_mode,
            pad_val: config.pad_val,
            unslice_mode: config.unslice_mode,
            static_shape: config.unslice_shape,
            squeeze_axes,
            last_shape: None,
        })
    }
}

impl SlidingSlicer {
    /// The padding FastEstimator computes for an axis: how far the first window reaching
    /// the end of the axis runs past it.
    fn end_padding(&self, axis: usize, length: i64) -> i64 {
        let (window, stride) = (self.window[axis], self.strides[axis]);
        if stride == 0 || window == -1 {
            return 0;
        }
        let mut start = 0;
        while start < length {
            let stop = start.saturating_add(window);
            if stop >= length {
                return stop - length;
            }
            start = start.saturating_add(stride);
        }
        0
    }

    /// The windows over an input of `shape`.
    fn plan(&self, shape: &[i64], key: &str) -> Result<Plan> {
        if shape.len() != self.window.len() {
            return Err(Error::msg(format!(
                "window_size {:?} has {} axes but `{key}` has shape {shape:?}; they must have \
                 the same rank",
                self.window,
                self.window.len()
            )));
        }
        let mut padded = Vec::with_capacity(shape.len());
        let mut pads = Vec::with_capacity(shape.len());
        let mut positions = Vec::with_capacity(shape.len());
        for (axis, &length) in shape.iter().enumerate() {
            let (window, stride) = (self.window[axis], self.strides[axis]);
            let pad = match self.pad_mode {
                PadMode::Constant => self.end_padding(axis, length),
                PadMode::Mirror if axis >= 2 => {
                    let pad = self.end_padding(axis, length);
                    if pad > 0 && pad >= length {
                        return Err(Error::msg(format!(
                            "cannot mirror-pad axis {axis} of `{key}` (shape {shape:?}) by \
                             {pad}: reflection needs the axis to be longer than the padding"
                        )));
                    }
                    pad
                }
                _ => 0,
            };
            let extent = length + pad;
            let mut axis_positions = Vec::new();
            if stride == 0 || stride >= length {
                axis_positions.push((0, extent));
            } else {
                if self.pad_mode == PadMode::NoPad && length < window {
                    return Err(Error::msg(format!(
                        "pad_mode `nopad` needs every slid axis to be at least as long as the \
                         window, but axis {axis} of `{key}` (shape {shape:?}) is shorter than \
                         {window}"
                    )));
                }
                let mut start = 0;
                while start < length {
                    let (mut first, mut stop) = (start, start.saturating_add(window));
                    if stop > length {
                        match self.pad_mode {
                            PadMode::Drop => {
                                start = start.saturating_add(stride);
                                continue;
                            }
                            PadMode::Partial => stop = length,
                            PadMode::NoPad => {
                                stop = length;
                                first = (length - window).max(0);
                            }
                            PadMode::Constant | PadMode::Mirror => {}
                        }
                    }
                    axis_positions.push((first, stop.min(extent)));
                    if stop >= length {
                        break;
                    }
                    start = start.saturating_add(stride);
                }
                if axis_positions.is_empty() {
                    return Err(Error::msg(format!(
                        "pad_mode `drop` leaves no window on axis {axis} of `{key}`: its \
                         length ({length}) is smaller than the window ({window})"
                    )));
                }
            }
            padded.push(extent);
            pads.push(pad);
            positions.push(axis_positions);
        }
        Ok(Plan {
            padded,
            pads,
            positions,
        })
    }

    /// `batch` padded as the plan says.
    fn pad(&self, batch: &Tensor, plan: &Plan) -> Result<Tensor> {
        if plan.pads.iter().all(|&pad| pad == 0) {
            return Ok(batch.shallow_clone());
        }
        match self.pad_mode {
            PadMode::Constant => {
                // Torch's pad list starts at the last axis: [before, after] per axis.
                let list: Vec<i64> = plan.pads.iter().rev().flat_map(|&p| [0, p]).collect();
                Ok(batch.f_pad(list.as_slice(), "constant", Some(self.pad_val))?)
            }
            PadMode::Mirror => {
                let mut padded = batch.shallow_clone();
                for (axis, &pad) in plan.pads.iter().enumerate() {
                    if pad == 0 {
                        continue;
                    }
                    let length = padded.size()[axis];
                    // 0, 1, ..., n-1, then n-2, n-3, ... (reflection without the edge).
                    let index: Vec<i64> = (0..length)
                        .chain((1..=pad).map(|j| length - 1 - j))
                        .collect();
                    let index = Tensor::from_slice(&index).f_to_device(batch.device())?;
                    padded = padded.f_index_select(axis as i64, &index)?;
                }
                Ok(padded)
            }
            PadMode::Drop | PadMode::Partial | PadMode::NoPad => Ok(batch.shallow_clone()),
        }
    }
}

impl Slicer for SlidingSlicer {
    fn slice(&mut self, key: &str, batch: &Tensor) -> Result<Vec<Tensor>> {
        let shape = batch.size();
        let plan = self.plan(&shape, key)?;
        self.last_shape = Some(shape);
        let padded = self.pad(batch, &plan)?;
        let mut minibatches = Vec::new();
        for cut in plan.cuts() {
            let mut minibatch = plan.narrow(&padded, &cut)?;
            for &axis in self.squeeze_axes.iter().rev() {
                let length = minibatch.size()[axis];
                if length != 1 {
                    return Err(Error::msg(format!(
                        "squeeze_window: the window on axis {axis} of `{key}` spans {length} \
                         entries (the whole axis), so the axis cannot be removed"
                    )));
                }
                minibatch = minibatch.f_squeeze_dim(axis as i64)?;
            }
            minibatches.push(minibatch);
        }
        Ok(minibatches)
    }

    fn unslice(&mut self, key: &str, slices: &[&Tensor]) -> Result<Tensor> {
        if slices.is_empty() {
            return Err(no_slices("SlidingSlicer", key));
        }
        let mut target = self
            .static_shape
            .clone()
            .or_else(|| self.last_shape.clone())
            .ok_or_else(|| {
                Error::msg(format!(
                    "cannot unslice `{key}`: this SlidingSlicer has sliced nothing yet and has \
                     no `unslice_shape`"
                ))
            })?;
        let mut windows = Vec::with_capacity(slices.len());
        for slice in slices {
            let mut window = slice.shallow_clone();
            for &axis in &self.squeeze_axes {
                window = window.f_unsqueeze(axis as i64).map_err(|e| {
                    Error::msg(format!(
                        "cannot re-insert squeezed axis {axis} into minibatches of `{key}` of \
                         shape {:?}: {}",
                        slice.size(),
                        Error::from(e)
                    ))
                })?;
            }
            windows.push(window);
        }
        let first = windows[0].size();
        if first.len() != self.window.len() {
            return Err(Error::msg(format!(
                "minibatches of `{key}` have shape {:?}, which does not have the rank of \
                 window_size {:?}",
                slices[0].size(),
                self.window
            )));
        }
        for (axis, length) in target.iter_mut().enumerate() {
            if self.strides[axis] == 0 {
                *length = first[axis];
            }
        }
        let plan = self.plan(&target, key)?;
        let cuts = plan.cuts();
        if cuts.len() != windows.len() {
            return Err(Error::msg(format!(
                "cannot unslice `{key}`: got {} minibatches, but a target shape of {target:?} \
                 with window_size {:?} and strides {:?} gives {} windows",
                windows.len(),
                self.window,
                self.strides,
                cuts.len()
            )));
        }
        let kind = match self.unslice_mode {
            UnsliceMode::Avg if slices[0].kind() == Kind::Double => Kind::Double,
            UnsliceMode::Avg => Kind::Float,
            UnsliceMode::Sum => slices[0].kind(),
        };
        let device = slices[0].device();
        let mut merged = Tensor::f_zeros(plan.padded.as_slice(), (kind, device))?;
        let counts = Tensor::f_zeros(plan.padded.as_slice(), (Kind::Int, device))?;
        for (index, (cut, window)) in cuts.iter().zip(&windows).enumerate() {
            let mut region = plan.narrow(&merged, cut)?;
            if region.size() != window.size() {
                return Err(Error::msg(format!(
                    "minibatch {index} of `{key}` has shape {:?}, but window {index} of the \
                     target shape {target:?} has shape {:?}",
                    slices[index].size(),
                    region.size()
                )));
            }
            // In place: `region` and the narrowed counts are views of `merged` and `counts`.
            let _ = region.f_add_(&window.f_to_kind(kind)?)?;
            let _ = plan.narrow(&counts, cut)?.f_add_scalar_(1)?;
        }
        if self.unslice_mode == UnsliceMode::Avg {
            merged = merged.f_div(&counts.f_clamp_min(1)?.f_to_kind(kind)?)?;
        }
        merged = merged.f_masked_fill(&counts.f_eq(0)?, self.pad_val)?;
        for (axis, (&length, &extent)) in target.iter().zip(&plan.padded).enumerate() {
            if length != extent {
                merged = merged.f_narrow(axis as i64, 0, length)?;
            }
        }
        Ok(merged)
    }
}

#[cfg(test)]
mod tests;
