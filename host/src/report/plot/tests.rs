//! Plot rendering: layout, legend, axes and the files written.

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
        svg.starts_with("<svg width=\"960\" height=\"748\""),
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
    // One legend above the panels, an entry per line.
    for label in [
        "a: train",
        "a: eval",
        "b &amp; &lt;c&gt;: train",
        "b &amp; &lt;c&gt;: eval",
        "b &amp; &lt;c&gt;: test",
    ] {
        assert_eq!(texts.iter().filter(|t| **t == label).count(), 1, "{label}");
    }
    // Each (run, mode) keeps its colour across panels, and has one legend sample.
    // a/train: ce, lr; a/eval: accuracy, ce; b/train: ce; b/eval, b/test: accuracy.
    for (color, lines) in [
        ("#1F77B4", 2),
        ("#FF7F0E", 2),
        ("#2CA02C", 1),
        ("#D62728", 1),
        ("#9467BD", 1),
    ] {
        assert_eq!(polylines(&svg, color).len(), lines + 1, "{color}");
    }
    assert_eq!(svg.matches("stroke-width=\"2\"").count(), 12);
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
    assert_eq!((reader.info().width, reader.info().height), (960, 748));
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
    assert!(svg.starts_with("<svg width=\"480\" height=\"408\""));
    assert!(svg.contains("\neval\n</text>") && !svg.contains("solo: eval"));
    assert_eq!(padded([3.0, 3.0].into_iter(), 0.05), 1.5..4.5);
    assert_eq!(padded(std::iter::empty(), 0.05), 0.0..1.0);
    assert_eq!(padded([0.0, 10.0].into_iter(), 0.1), -1.0..11.0);
}

#[test]
fn bookkeeping_is_left_out_unless_all_keys_are_asked_for() {
    let logged: Vec<String> = [
        "ce",
        "accuracy",
        "lenet_lr",
        "min_ce",
        "max_accuracy",
        "min_x",
    ]
    .map(String::from)
    .to_vec();
    for key in [
        "epoch_time(sec)",
        "steps/sec",
        "steps/sec (overall)",
        "eval_samples/sec",
    ] {
        assert!(is_bookkeeping(key, &logged), "{key}");
    }
    for key in ["since_best_ce", "min_ce", "max_accuracy"] {
        assert!(is_bookkeeping(key, &logged), "{key}");
    }
    // `min_x` tracks nothing logged: a value of its own.
    for key in ["ce", "accuracy", "lenet_lr", "min_x"] {
        assert!(!is_bookkeeping(key, &logged), "{key}");
    }
    let runs = [run(
        "r",
        &[
            ("train", "ce", 1, 2.0),
            ("train", "steps/sec", 1, 50.0),
            ("eval", "ce", 1, 1.0),
            ("eval", "min_ce", 1, 1.0),
        ],
    )];
    let default = Layout::of(&runs, PlotOptions::default()).unwrap();
    assert_eq!(default.keys, ["ce"]);
    let all = Layout::of(&runs, PlotOptions { all_keys: true }).unwrap();
    assert_eq!(all.keys, ["ce", "min_ce", "steps/sec"]);
    // Bookkeeping alone is still plotted.
    let only = [run("r", &[("train", "steps/sec", 1, 50.0)])];
    assert_eq!(
        Layout::of(&only, PlotOptions::default()).unwrap().keys,
        ["steps/sec"]
    );
}

#[test]
fn a_falling_loss_gets_a_log_axis_and_a_legend_row_holds_what_fits() {
    let range = log_range([2.3, 0.01].into_iter()).unwrap();
    assert!(range.start < 0.01 && range.end > 2.3, "{range:?}");
    assert_eq!(log_range([2.3, 0.1].into_iter()), None);
    assert_eq!(log_range([1.0, 0.0].into_iter()), None);
    let svg = render_svg(&[run(
        "r",
        &[("train", "ce", 1, 2.3), ("train", "ce", 9, 0.01)],
    )])
    .unwrap();
    assert!(svg.contains("\nce (log scale)\n</text>"));
    let labels: Vec<String> = (0..12).map(|i| format!("run {i}: train")).collect();
    let rows = legend_rows(&labels, 960);
    assert!(
        rows.len() > 1 && rows.iter().all(|r| !r.is_empty()),
        "{rows:?}"
    );
    assert_eq!(rows.concat(), (0..12).collect::<Vec<_>>());
}

#[test]
fn ticks_are_short_and_constants_get_an_axis_of_their_own_size() {
    assert_eq!(tick(0.001), "0.001");
    assert_eq!(tick(0.97351), "0.9735");
    assert_eq!(tick(1250.0), "1250");
    assert_eq!(tick(-0.0), "0");
    assert_eq!(tick(-5.551115123125783e-17), "0");
    assert_eq!(tick(2.5e-5), "2.5e-5");
    assert_eq!(padded([0.001, 0.001].into_iter(), 0.05), 0.0005..0.0015);
    assert_eq!(padded([0.0].into_iter(), 0.05), -0.5..0.5);
}
