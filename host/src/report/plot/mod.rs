//! Plots of logged histories: a grid with one panel per metric key, x = step, one line per
//! (run, mode), each (run, mode) the same colour in every panel.
//!
//! SVG and PNG. Text is laid out with Noto Sans embedded in the binary (plotters' `ab_glyph`
//! backend), never a system font, so plots render the same on a bare server and the output is a
//! function of the input alone: same histories, same bytes.

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::History;
use crate::error::{Error, Result};

/// One run's logged history, under the name its lines are labelled with.
#[derive(Debug, Clone, PartialEq)]
pub struct RunHistory {
    /// The run's name in legends and titles.
    pub name: String,
    /// What the run logged.
    pub history: History,
}

const PANEL_WIDTH: u32 = 480;
const PANEL_HEIGHT: u32 = 340;
const TITLE_HEIGHT: u32 = 44;

/// Matplotlib's `tab10`: distinct, and familiar from FastEstimator's plots.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// What a plot shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlotOptions {
    /// Every logged key gets a panel, bookkeeping included (see [`is_bookkeeping`]); by
    /// default only the values a person watches: losses, metrics, learning rates.
    pub all_keys: bool,
}

/// Whether `key` is bookkeeping rather than a value a person watches: times and speeds
/// (`epoch_time(sec)`, `steps/sec`, `train_samples/sec`, `steps/sec (overall)`) and the
/// trackers of another logged value (`since_best_ce`, `min_ce`, `max_accuracy`).
pub fn is_bookkeeping(key: &str, logged: &[String]) -> bool {
    let tracks_another = |prefix: &str| {
        key.strip_prefix(prefix)
            .is_some_and(|rest| logged.iter().any(|k| k == rest))
    };
    key.ends_with("(sec)")
        || key.contains("/sec")
        || key.starts_with("since_best_")
        || tracks_another("min_")
        || tracks_another("max_")
}

/// Writes the plot of `runs` to `path`, as SVG or PNG by the path's extension, with the
/// values a person watches (see [`PlotOptions`]).
pub fn write_plot(runs: &[RunHistory], path: &Path) -> Result<()> {
    write_plot_with(runs, path, PlotOptions::default())
}

/// [`write_plot`] with `options`.
pub fn write_plot_with(runs: &[RunHistory], path: &Path, options: PlotOptions) -> Result<()> {
    let bytes = match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => render_svg_with(runs, options)?.into_bytes(),
        Some("png") => render_png_with(runs, options)?,
        _ => {
            return Err(Error::Usage(format!(
                "{}: plots are .svg or .png files",
                path.display()
            )))
        }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

/// The plot of `runs` as an SVG document, with the default [`PlotOptions`].
pub fn render_svg(runs: &[RunHistory]) -> Result<String> {
    render_svg_with(runs, PlotOptions::default())
}

/// The plot of `runs` as an SVG document.
pub fn render_svg_with(runs: &[RunHistory], options: PlotOptions) -> Result<String> {
    let layout = Layout::of(runs, options)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, layout.size).into_drawing_area();
        draw(&root, runs, &layout)?;
        root.present().map_err(drawing)?;
    }
    Ok(svg)
}

/// The plot of `runs` as a PNG file's bytes, with the default [`PlotOptions`].
pub fn render_png(runs: &[RunHistory]) -> Result<Vec<u8>> {
    render_png_with(runs, PlotOptions::default())
}

/// The plot of `runs` as a PNG file's bytes.
pub fn render_png_with(runs: &[RunHistory], options: PlotOptions) -> Result<Vec<u8>> {
    let layout = Layout::of(runs, options)?;
    let (width, height) = layout.size;
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    {
        let root = super::png_text::GlyphText(BitMapBackend::with_buffer(&mut rgb, layout.size))
            .into_drawing_area();
        draw(&root, runs, &layout)?;
        root.present().map_err(drawing)?;
    }
    let mut png_bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut png_bytes, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let encoded = encoder
        .write_header()
        .and_then(|mut writer| writer.write_image_data(&rgb).and_then(|()| writer.finish()));
    encoded.map_err(|e| Error::Internal(format!("PNG encoding failed: {e}")))?;
    Ok(png_bytes)
}

/// Where everything goes, decided before drawing so both backends draw the same picture.
struct Layout {
    size: (u32, u32),
    grid: (usize, usize),
    keys: Vec<String>,
    /// Every (run index, mode) with a value anywhere; its position picks its colour.
    lines: Vec<(usize, String)>,
    /// The legend's rows, each the indices (into `lines`) of its entries. The legend sits
    /// between the title and the panels, so it never covers a line's newest points.
    legend: Vec<Vec<usize>>,
}

impl Layout {
    fn of(runs: &[RunHistory], options: PlotOptions) -> Result<Self> {
        let mut keys: Vec<String> = Vec::new();
        let mut lines = Vec::new();
        for (run, record) in runs.iter().enumerate() {
            for mode in ordered_modes(&record.history) {
                let series = &record.history[mode];
                if series.values().all(|s| s.is_empty()) {
                    continue;
                }
                lines.push((run, mode.to_owned()));
                keys.extend(
                    series
                        .iter()
                        .filter(|(_, s)| !s.is_empty())
                        .map(|(k, _)| k.clone()),
                );
            }
        }
        keys.sort();
        keys.dedup();
        if keys.is_empty() {
            return Err(Error::Run(
                "nothing to plot: the runs logged no values".into(),
            ));
        }
        if !options.all_keys {
            let watched: Vec<String> = keys
                .iter()
                .filter(|k| !is_bookkeeping(k, &keys))
                .cloned()
                .collect();
            // A run that logged bookkeeping alone still gets a plot of it.
            if !watched.is_empty() {
                keys = watched;
            }
        }
        // Near-square grid, wider than tall (ceil of the square root columns).
        let cols = (1..).find(|c| c * c >= keys.len()).unwrap_or(1);
        let rows = keys.len().div_ceil(cols);
        let width = PANEL_WIDTH * cols as u32;
        let labels: Vec<String> = lines.iter().map(|l| line_label(runs, l)).collect();
        let legend = legend_rows(&labels, width);
        let size = (
            width,
            TITLE_HEIGHT + LEGEND_ROW_HEIGHT * legend.len() as u32 + PANEL_HEIGHT * rows as u32,
        );
        Ok(Self {
            size,
            grid: (rows, cols),
            keys,
            lines,
            legend,
        })
    }
}

const LEGEND_ROW_HEIGHT: u32 = 24;
const LEGEND_FONT: u32 = 14;
/// The legend's sample line and the gap after it, in pixels.
const LEGEND_SAMPLE: u32 = 26;
const LEGEND_GAP: u32 = 22;

/// A line's label: its mode, prefixed by its run's name when there are several runs.
fn line_label(runs: &[RunHistory], (run, mode): &(usize, String)) -> String {
    if runs.len() == 1 {
        mode.clone()
    } else {
        format!("{}: {mode}", runs[*run].name)
    }
}

/// The legend entries packed into rows no wider than `width`, in order. Widths are estimated
/// from the text (the same for both backends, so the layout is a function of the input).
fn legend_rows(labels: &[String], width: u32) -> Vec<Vec<usize>> {
    let mut rows: Vec<Vec<usize>> = Vec::new();
    let mut used = width;
    for (index, label) in labels.iter().enumerate() {
        let entry = LEGEND_SAMPLE + text_width(label) + LEGEND_GAP;
        if used + entry > width.saturating_sub(20) || rows.is_empty() {
            rows.push(Vec::new());
            used = 20;
        }
        used += entry;
        if let Some(row) = rows.last_mut() {
            row.push(index);
        }
    }
    rows
}

/// Noto Sans at the legend's size averages a little over half the size per character.
fn text_width(text: &str) -> u32 {
    (text.chars().count() as u32 * LEGEND_FONT * 58).div_ceil(100)
}

/// Modes in run order (train, eval, test, infer), then any others alphabetically.
fn ordered_modes(history: &History) -> Vec<&str> {
    let rank = |mode: &str| {
        ["train", "eval", "test", "infer"]
            .iter()
            .position(|m| *m == mode)
            .unwrap_or(4)
    };
    let mut modes: Vec<&str> = history.keys().map(String::as_str).collect();
    modes.sort_by_key(|m| (rank(m), *m));
    modes
}

fn drawing<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> Error {
    Error::Internal(format!("drawing the plot failed: {e}"))
}

/// The embedded font, registered once per process under the family plotters asks for.
fn font_ready() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, ttf_noto_sans::REGULAR)
            .is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Internal("the embedded font does not load".into()))
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    runs: &[RunHistory],
    layout: &Layout,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    font_ready()?;
    root.fill(&WHITE).map_err(drawing)?;
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    let title = match names.as_slice() {
        [one] => one.to_string(),
        many => format!("{} runs: {}", many.len(), many.join(", ")),
    };
    let body = root.titled(&title, ("sans-serif", 22)).map_err(drawing)?;
    let legend_height = LEGEND_ROW_HEIGHT * layout.legend.len() as u32;
    let (legend, panels_area) = body.split_vertically(legend_height);
    draw_legend(&legend, runs, layout)?;
    let panels = panels_area.split_evenly(layout.grid);
    for (key, panel) in layout.keys.iter().zip(&panels) {
        draw_panel(panel, key, runs, layout)?;
    }
    Ok(())
}

/// One row of entries per legend row, centred: a short line in the colour, then the label.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[RunHistory],
    layout: &Layout,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let font = ("sans-serif", LEGEND_FONT).into_font().color(&BLACK);
    let width = layout.size.0 as i32;
    for (row, entries) in layout.legend.iter().enumerate() {
        let labels: Vec<String> = entries
            .iter()
            .map(|&i| line_label(runs, &layout.lines[i]))
            .collect();
        let total: u32 = labels
            .iter()
            .map(|l| LEGEND_SAMPLE + text_width(l) + LEGEND_GAP)
            .sum::<u32>()
            - LEGEND_GAP;
        let mut x = (width - total as i32) / 2;
        let y = (LEGEND_ROW_HEIGHT * row as u32 + LEGEND_ROW_HEIGHT / 2) as i32;
        for (&index, label) in entries.iter().zip(&labels) {
            let color = PALETTE[index % PALETTE.len()];
            area.draw(&PathElement::new(
                vec![(x, y), (x + LEGEND_SAMPLE as i32 - 8, y)],
                color.stroke_width(2),
            ))
            .map_err(drawing)?;
            // Text hangs from its top; its x-height centred on the sample line.
            let text_y = y - LEGEND_FONT as i32 / 2 + 3;
            area.draw(&Text::new(
                label.clone(),
                (x + LEGEND_SAMPLE as i32, text_y),
                font.clone(),
            ))
            .map_err(drawing)?;
            x += (LEGEND_SAMPLE + text_width(label) + LEGEND_GAP) as i32;
        }
    }
    Ok(())
}

/// One (run, mode)'s values of one key.
struct Line {
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// Draws `$series` on a chart built by `$builder` over `$x` and `$y`: the same code for a
/// linear and a logarithmic value axis, whose chart types differ.
macro_rules! draw_chart {
    ($builder:expr, $x:expr, $y:expr, $series:expr) => {{
        let mut chart = $builder.build_cartesian_2d($x, $y).map_err(drawing)?;
        chart
            .configure_mesh()
            .x_desc("step")
            .x_labels(6)
            .y_labels(6)
            .x_label_formatter(&|step| format!("{}", step.round() as i64))
            .y_label_formatter(&|value| tick(*value))
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .bold_line_style(BLACK.mix(0.12))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(drawing)?;
        for Line { color, points } in $series {
            let style = color.stroke_width(2);
            // A single point makes no line: mark it so the value shows.
            let markers = if points.len() == 1 {
                points.clone()
            } else {
                Vec::new()
            };
            chart
                .draw_series(LineSeries::new(points, style))
                .map_err(drawing)?;
            chart
                .draw_series(
                    markers
                        .into_iter()
                        .map(|p| Circle::new(p, 3, color.filled())),
                )
                .map_err(drawing)?;
        }
    }};
}

fn draw_panel<DB: DrawingBackend>(
    panel: &DrawingArea<DB, Shift>,
    key: &str,
    runs: &[RunHistory],
    layout: &Layout,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    // NaN and infinities have no place on an axis: they are left out of the line.
    let series: Vec<Line> = layout
        .lines
        .iter()
        .enumerate()
        .filter_map(|(index, (run, mode))| {
            let points: Vec<(f64, f64)> = runs[*run]
                .history
                .get(mode)?
                .get(key)?
                .iter()
                .filter(|(_, v)| v.is_finite())
                .map(|(&step, &v)| (step as f64, v))
                .collect();
            Some(Line {
                color: PALETTE[index % PALETTE.len()],
                points,
            })
        })
        .collect();
    let points = series.iter().flat_map(|line| &line.points);
    let x = padded(points.clone().map(|p| p.0), 0.0);
    let log = log_range(points.clone().map(|p| p.1));
    let caption = if log.is_some() {
        format!("{key} (log scale)")
    } else {
        key.to_owned()
    };
    let mut builder = ChartBuilder::on(panel);
    builder
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(64);
    match log {
        Some(y) => draw_chart!(builder, x, y.log_scale(), series),
        None => draw_chart!(builder, x, padded(points.map(|p| p.1), 0.05), series),
    }
    Ok(())
}

/// A logarithmic value axis for values that are all positive and span more than two decades
/// (a loss falling from 2.3 to 0.01, a decaying learning rate), where a linear axis would
/// flatten everything after the first steps; `None` for the rest.
fn log_range(values: impl Iterator<Item = f64>) -> Option<Range<f64>> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    (lo > 0.0 && hi / lo > 100.0).then(|| lo / 1.25..hi * 1.25)
}

/// The range of `values` widened by `margin` of its width on each side; a single value (or
/// none) gets a unit-wide range so the axis still has a scale.
fn padded(values: impl Iterator<Item = f64>, margin: f64) -> Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if lo > hi {
        return 0.0..1.0;
    }
    if hi - lo < f64::EPSILON * lo.abs().max(1.0) {
        // A constant: centre it, with a scale of its own size (a learning rate of 1e-3 must
        // not sit on a -0.5..0.5 axis).
        let half = if lo == 0.0 { 0.5 } else { lo.abs() * 0.5 };
        return lo - half..hi + half;
    }
    let pad = (hi - lo) * margin;
    lo - pad..hi + pad
}

/// An axis label: up to 4 significant decimals, scientific for very small or large values,
/// never `-0`.
fn tick(value: f64) -> String {
    let magnitude = value.abs();
    // Below 1e-12 a tick is zero give or take rounding (`-5.6e-17` on a constant-0 axis).
    if magnitude < 1e-12 {
        return "0".into();
    }
    if !(1e-3..1e5).contains(&magnitude) {
        return format!("{value:.1e}");
    }
    let decimals = (3 - magnitude.log10().floor() as i32).clamp(0, 6) as usize;
    let text = format!("{value:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    };
    if text == "-0" {
        "0".into()
    } else {
        text
    }
}

#[cfg(test)]
mod tests;
