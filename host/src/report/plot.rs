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

/// Writes the plot of `runs` to `path`, as SVG or PNG by the path's extension.
pub fn write_plot(runs: &[RunHistory], path: &Path) -> Result<()> {
    let bytes = match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => render_svg(runs)?.into_bytes(),
        Some("png") => render_png(runs)?,
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

/// The plot of `runs` as an SVG document.
pub fn render_svg(runs: &[RunHistory]) -> Result<String> {
    let layout = Layout::of(runs)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, layout.size).into_drawing_area();
        draw(&root, runs, &layout)?;
        root.present().map_err(drawing)?;
    }
    Ok(svg)
}

/// The plot of `runs` as a PNG file's bytes.
pub fn render_png(runs: &[RunHistory]) -> Result<Vec<u8>> {
    let layout = Layout::of(runs)?;
    let (width, height) = layout.size;
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, layout.size).into_drawing_area();
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
}

impl Layout {
    fn of(runs: &[RunHistory]) -> Result<Self> {
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
        // Near-square grid, wider than tall (ceil of the square root columns).
        let cols = (1..).find(|c| c * c >= keys.len()).unwrap_or(1);
        let rows = keys.len().div_ceil(cols);
        let size = (
            PANEL_WIDTH * cols as u32,
            TITLE_HEIGHT + PANEL_HEIGHT * rows as u32,
        );
        Ok(Self {
            size,
            grid: (rows, cols),
            keys,
            lines,
        })
    }
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
    let panels = body.split_evenly(layout.grid);
    for (key, panel) in layout.keys.iter().zip(&panels) {
        draw_panel(panel, key, runs, layout)?;
    }
    Ok(())
}

/// One (run, mode)'s values of one key.
struct Line {
    color: RGBColor,
    label: String,
    points: Vec<(f64, f64)>,
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
            let label = if runs.len() == 1 {
                mode.clone()
            } else {
                format!("{}: {mode}", runs[*run].name)
            };
            Some(Line {
                color: PALETTE[index % PALETTE.len()],
                label,
                points,
            })
        })
        .collect();
    let points = series.iter().flat_map(|line| &line.points);
    let x = padded(points.clone().map(|p| p.0), 0.0);
    let y = padded(points.map(|p| p.1), 0.05);

    let mut chart = ChartBuilder::on(panel)
        .caption(key, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)
        .map_err(drawing)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&|step| format!("{}", step.round() as i64))
        .y_label_formatter(&|value| tick(*value))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(drawing)?;
    for Line {
        color,
        label,
        points,
    } in series
    {
        let style = color.stroke_width(2);
        let markers = if points.len() == 1 {
            points.clone()
        } else {
            Vec::new()
        };
        chart
            .draw_series(LineSeries::new(points, style))
            .map_err(drawing)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        // A single point makes no line: mark it so the value shows.
        chart
            .draw_series(
                markers
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(drawing)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(drawing)
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
    if magnitude == 0.0 {
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
mod tests {
    use super::*;
    use crate::report::test_dir::TestDir;

    fn run(name: &str, entries: &[(&str, &str, u64, f64)]) -> RunHistory {
        let mut history = History::new();
        for &(mode, key, step, value) in entries {
            history
                .entry(mode.into())
                .or_default()
                .entry(key.into())
                .or_default()
                .insert(step, value);
        }
        RunHistory {
            name: name.into(),
            history,
        }
    }

    fn two_runs() -> Vec<RunHistory> {
        vec![
            run(
                "a",
                &[
                    ("train", "ce", 100, 0.9),
                    ("train", "ce", 200, 0.5),
                    ("train", "ce", 300, 0.3),
                    ("train", "lr", 100, 1e-3),
                    ("train", "lr", 200, 1e-3),
                    ("train", "lr", 300, 5e-4),
                    ("eval", "ce", 150, 0.6),
                    ("eval", "ce", 300, 0.4),
                    ("eval", "accuracy", 150, 0.8),
                    ("eval", "accuracy", 300, 0.9),
                ],
            ),
            run(
                "b & <c>",
                &[
                    ("train", "ce", 100, 1.0),
                    ("train", "ce", 200, f64::NAN),
                    ("train", "ce", 300, 0.2),
                    ("eval", "accuracy", 300, 0.95),
                    ("test", "accuracy", 300, 0.94),
                ],
            ),
        ]
    }

    /// Checks that `svg` is well-formed XML: balanced tags, quoted attributes, escaped text.
    fn assert_well_formed(svg: &str) {
        let mut open: Vec<&str> = Vec::new();
        let mut rest = svg;
        while let Some(lt) = rest.find('<') {
            assert_escaped(&rest[..lt]);
            let gt = lt + rest[lt..].find('>').expect("unclosed tag");
            let tag = &rest[lt + 1..gt];
            rest = &rest[gt + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop(), Some(name), "mismatched </{name}>");
                continue;
            }
            let self_closing = tag.ends_with('/');
            let tag = tag.trim_end_matches('/');
            let (name, mut attrs) = tag.split_once(' ').unwrap_or((tag, ""));
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
                "{tag}"
            );
            while !attrs.trim().is_empty() {
                let (key, value) = attrs
                    .trim_start()
                    .split_once("=\"")
                    .expect("unquoted attribute");
                assert!(
                    key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                    "{key}"
                );
                let end = value.find('"').expect("unterminated attribute");
                assert_escaped(&value[..end]);
                attrs = &value[end + 1..];
            }
            if !self_closing {
                open.push(name);
            }
        }
        assert_escaped(rest);
        assert!(
            rest.trim().is_empty() && open.is_empty(),
            "unclosed: {open:?}"
        );
    }

    fn assert_escaped(text: &str) {
        assert!(!text.contains(['<', '>', '"']), "{text:?}");
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..text[i..].find(';').map_or(text.len(), |e| i + e + 1)];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&entity),
                "{text:?}"
            );
        }
    }

    fn polylines<'s>(svg: &'s str, stroke: &str) -> Vec<&'s str> {
        svg.lines()
            .filter(|l| {
                l.starts_with("<polyline")
                    && l.contains(&format!("stroke=\"{stroke}\" stroke-width=\"2\""))
            })
            .collect()
    }

    #[test]
    fn the_svg_has_a_panel_per_key_and_a_line_per_run_and_mode() {
        let svg = render_svg(&two_runs()).unwrap();
        assert_well_formed(&svg);
        assert!(
            svg.starts_with("<svg width=\"960\" height=\"724\""),
            "{}",
            &svg[..80]
        );
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .map(|t| t.split('\n').nth(1).unwrap_or(""))
            .collect();
        for title in ["accuracy", "ce", "lr", "2 runs: a, b &amp; &lt;c&gt;"] {
            assert_eq!(
                texts.iter().filter(|t| **t == title).count(),
                1,
                "{title}: {texts:?}"
            );
        }
        // One legend entry per panel the line is in.
        for (label, panels) in [
            ("a: train", 2),
            ("a: eval", 2),
            ("b &amp; &lt;c&gt;: train", 1),
            ("b &amp; &lt;c&gt;: eval", 1),
            ("b &amp; &lt;c&gt;: test", 1),
        ] {
            assert_eq!(
                texts.iter().filter(|t| **t == label).count(),
                panels,
                "{label}"
            );
        }
        // Each (run, mode) keeps its colour across panels; each line has one legend sample.
        // a/train: ce, lr; a/eval: accuracy, ce; b/train: ce; b/eval, b/test: accuracy.
        for (color, lines) in [
            ("#1F77B4", 2),
            ("#FF7F0E", 2),
            ("#2CA02C", 1),
            ("#D62728", 1),
            ("#9467BD", 1),
        ] {
            assert_eq!(polylines(&svg, color).len(), 2 * lines, "{color}");
        }
        assert_eq!(svg.matches("stroke-width=\"2\"").count(), 14);
        // b/train's NaN at step 200 is left out: two points; b's single-point lines get markers.
        assert_eq!(polylines(&svg, "#2CA02C")[0].matches(',').count(), 2);
        assert_eq!(svg.matches("<circle").count(), 2);
    }

    #[test]
    fn output_depends_on_the_input_alone() {
        let runs = two_runs();
        assert_eq!(render_svg(&runs).unwrap(), render_svg(&runs).unwrap());
        assert_eq!(render_png(&runs).unwrap(), render_png(&runs).unwrap());
        let mut changed = runs.clone();
        changed[0]
            .history
            .get_mut("eval")
            .unwrap()
            .get_mut("ce")
            .unwrap()
            .insert(300, 0.41);
        assert_ne!(render_svg(&runs).unwrap(), render_svg(&changed).unwrap());
    }

    #[test]
    fn plots_are_written_by_extension() {
        let dir = TestDir::new("plot-files");
        let runs = two_runs();
        let png_path = dir.path().join("out/cmp.png");
        write_plot(&runs, &png_path).unwrap();
        let decoder = png::Decoder::new(std::io::BufReader::new(
            std::fs::File::open(&png_path).unwrap(),
        ));
        let reader = decoder.read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), (960, 724));
        let svg_path = dir.path().join("cmp.svg");
        write_plot(&runs, &svg_path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&svg_path).unwrap(),
            render_svg(&runs).unwrap()
        );
        let error = write_plot(&runs, &dir.path().join("cmp.pdf")).unwrap_err();
        assert!(matches!(error, Error::Usage(_)), "{error}");
        let empty = [run("empty", &[])];
        assert!(render_svg(&empty)
            .unwrap_err()
            .to_string()
            .contains("nothing to plot"));
    }

    #[test]
    fn one_panel_needs_one_cell_and_degenerate_ranges_get_a_scale() {
        let one = [run("solo", &[("eval", "accuracy", 5, 0.5)])];
        let svg = render_svg(&one).unwrap();
        assert!(svg.starts_with("<svg width=\"480\" height=\"384\""));
        assert!(svg.contains("\neval\n</text>") && !svg.contains("solo: eval"));
        assert_eq!(padded([3.0, 3.0].into_iter(), 0.05), 1.5..4.5);
        assert_eq!(padded(std::iter::empty(), 0.05), 0.0..1.0);
        assert_eq!(padded([0.0, 10.0].into_iter(), 0.1), -1.0..11.0);
    }

    #[test]
    fn ticks_are_short_and_constants_get_an_axis_of_their_own_size() {
        assert_eq!(tick(0.001), "0.001");
        assert_eq!(tick(0.97351), "0.9735");
        assert_eq!(tick(1250.0), "1250");
        assert_eq!(tick(-0.0), "0");
        assert_eq!(tick(2.5e-5), "2.5e-5");
        assert_eq!(padded([0.001, 0.001].into_iter(), 0.05), 0.0005..0.0015);
        assert_eq!(padded([0.0].into_iter(), 0.05), -0.5..0.5);
    }
}
