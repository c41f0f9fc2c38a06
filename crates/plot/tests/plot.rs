//! The chart renderer: decode its PNG and check that the series, reference lines, ticks and
//! legend land where the layout says, and that bad input is refused with a typed error.

use plot::{Chart, Frame, HLINE_COLOUR, MAX_SIDE, PlotError, Series, series_colour, text_width};
use proptest::prelude::*;

struct Image {
    w: u32,
    h: u32,
    rgb: Vec<u8>,
}

impl Image {
    fn px(&self, x: i64, y: i64) -> Option<[u8; 3]> {
        if x < 0 || y < 0 || x >= self.w as i64 || y >= self.h as i64 {
            return None;
        }
        let i = (y as usize * self.w as usize + x as usize) * 3;
        Some([self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]])
    }

    /// Whether colour `c` appears exactly within `r` pixels of `(x, y)`.
    fn has_near(&self, x: f64, y: f64, r: i64, c: [u8; 3]) -> bool {
        let (x, y) = (x.floor() as i64, y.floor() as i64);
        (-r..=r).any(|dy| (-r..=r).any(|dx| self.px(x + dx, y + dy) == Some(c)))
    }

    fn count_in(&self, x0: u32, y0: u32, x1: u32, y1: u32, c: [u8; 3]) -> usize {
        let mut n = 0;
        for y in y0..y1 {
            for x in x0..x1 {
                if self.px(x as i64, y as i64) == Some(c) {
                    n += 1;
                }
            }
        }
        n
    }
}

fn decode(bytes: &[u8]) -> Image {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    buf.truncate(info.buffer_size());
    Image {
        w: info.width,
        h: info.height,
        rgb: buf,
    }
}

fn diagonal() -> Chart {
    Chart::new("Diagonal", "time (s)", "MB/s")
        .with_size(640, 400)
        .with_series(Series::new("up", vec![(0.0, 0.0), (10.0, 10.0)]))
}

#[test]
fn drawing_is_deterministic() {
    let a = example_chart().to_png().unwrap();
    let b = example_chart().to_png().unwrap();
    assert_eq!(a, b);
    // And the bytes depend on the data.
    let mut c = example_chart();
    c.series[1].points[3].1 *= 1.2;
    assert_ne!(a, c.to_png().unwrap());
}

#[test]
fn png_has_the_requested_size() {
    for (w, h) in [(640, 400), (300, 200), (1000, 700)] {
        let img = decode(&diagonal().with_size(w, h).to_png().unwrap());
        assert_eq!((img.w, img.h), (w, h));
        assert_eq!(img.rgb.len(), w as usize * h as usize * 3);
    }
}

#[test]
fn series_colour_appears_where_its_points_map_and_not_elsewhere() {
    let mut chart = diagonal();
    chart.series[0].label.clear(); // no legend, whose sample line has the series colour
    assert_eq!(chart.frame().unwrap().legend, None);
    let frame = chart.frame().unwrap();
    let img = decode(&chart.to_png().unwrap());
    let c = series_colour(0);
    for v in [0.5, 1.0, 2.5, 5.0, 7.5, 9.5] {
        let (x, y) = frame.to_pixel(v, v);
        assert!(
            img.has_near(x, y, 1, c),
            "no series colour near ({v}, {v}) -> ({x}, {y})"
        );
    }
    // Points off the line, well away from it.
    for (vx, vy) in [(8.0, 2.0), (7.0, 1.0), (2.0, 6.0)] {
        let (x, y) = frame.to_pixel(vx, vy);
        assert!(!img.has_near(x, y, 4, c), "series colour at ({vx}, {vy})");
    }
}

#[test]
fn constant_series_draws_a_horizontal_run() {
    let chart = Chart::new("", "x", "")
        .with_size(500, 300)
        .with_y_range(Some(0.0), Some(10.0))
        .with_series(Series::new("", vec![(0.0, 3.0), (4.0, 3.0), (20.0, 3.0)]));
    let frame = chart.frame().unwrap();
    assert_eq!(frame.legend, None, "no labels, no legend");
    let img = decode(&chart.to_png().unwrap());
    let c = series_colour(0);
    let (x0, y) = frame.to_pixel(0.0, 3.0);
    let (x1, _) = frame.to_pixel(20.0, 3.0);
    let row = y.floor() as i64;
    let mut run = 0;
    for x in (x0.ceil() as i64 + 1)..(x1.floor() as i64 - 1) {
        let hit = (row - 1..=row + 1).any(|r| img.px(x, r) == Some(c));
        assert!(hit, "column {x} has no series colour at row {row}");
        run += 1;
        // Two pixels wide: nothing of it three rows away.
        assert_ne!(img.px(x, row - 3), Some(c));
        assert_ne!(img.px(x, row + 3), Some(c));
    }
    assert!(run > 300, "run of {run} columns");
}

#[test]
fn fixed_y_range_is_used_exactly_and_clips() {
    let chart = diagonal().with_y_range(Some(2.0), Some(6.0));
    let f = chart.frame().unwrap();
    assert_eq!((f.y_min, f.y_max), (2.0, 6.0));
    let img = decode(&chart.to_png().unwrap());
    let c = series_colour(0);
    // Nothing of the series above the plot area or below the x axis.
    assert_eq!(img.count_in(0, 0, img.w, f.top, c), 0);
    assert_eq!(img.count_in(0, f.bottom + 1, img.w, img.h, c), 0);
    // But it does cross the plot area.
    let (x, y) = f.to_pixel(4.0, 4.0);
    assert!(img.has_near(x, y, 1, c));
}

#[test]
fn reference_line_is_drawn_at_its_value() {
    let chart = diagonal().hline(7.0, "expected");
    let f = chart.frame().unwrap();
    let img = decode(&chart.to_png().unwrap());
    let y = f.to_pixel(0.0, 7.0).1;
    let hits = (f.left..f.right)
        .filter(|&x| img.has_near(x as f64, y, 1, HLINE_COLOUR))
        .count();
    let width = (f.right - f.left) as usize;
    // Dashed: more than a third of the columns, less than all of them.
    assert!(hits > width / 3 && hits < width, "{hits} of {width}");
    // Without the line, that colour is not on that row.
    let plain = decode(&diagonal().to_png().unwrap());
    let hits = (f.left..f.right)
        .filter(|&x| plain.has_near(x as f64, y, 1, HLINE_COLOUR))
        .count();
    assert_eq!(hits, 0);
}

#[test]
fn automatic_range_includes_reference_lines() {
    let f = diagonal().hline(42.0, "far").frame().unwrap();
    assert!(
        f.y_max >= 42.0 && f.y_min <= 0.0,
        "{}..{}",
        f.y_min,
        f.y_max
    );
}

#[test]
fn ticks_are_nice_and_inside_the_axis() {
    let cases: [(f64, f64); 6] = [
        (0.0, 97.0),
        (-3.2, 4.1),
        (1e9, 1.3e9),
        (0.001, 0.0042),
        (5.0, 5.0),
        (-1e18, 1e18),
    ];
    for (lo, hi) in cases {
        let chart =
            Chart::new("t", "x", "y").with_series(Series::new("s", vec![(lo, lo), (hi, hi)]));
        let f = chart.frame().unwrap();
        for (min, max, step, ticks) in [
            (f.x_min, f.x_max, f.x_step, &f.x_ticks),
            (f.y_min, f.y_max, f.y_step, &f.y_ticks),
        ] {
            assert!(min <= lo && max >= hi, "{min}..{max} misses {lo}..{hi}");
            let mantissa = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9),
                "step {step}"
            );
            assert!(ticks.len() >= 2, "{ticks:?} for {lo}..{hi}");
            for pair in ticks.windows(2) {
                assert!(
                    ((pair[1] - pair[0]) - step).abs() <= step * 1e-6,
                    "{ticks:?}"
                );
            }
            assert!(ticks[0] >= min && *ticks.last().unwrap() <= max);
        }
    }
}

#[test]
fn legend_shows_every_series_colour() {
    let mut chart = Chart::new("Three", "x", "y").with_size(700, 420);
    for i in 0..3 {
        let k = i as f64;
        chart = chart.with_series(Series::new(
            format!("tenant {i}"),
            vec![(0.0, k), (1.0, k + 0.5)],
        ));
    }
    let f = chart.frame().unwrap();
    let l = f.legend.expect("a legend");
    assert!(l.x >= f.left && l.x + l.w <= f.right && l.y >= f.top && l.y + l.h <= f.bottom);
    let img = decode(&chart.to_png().unwrap());
    for i in 0..3 {
        let n = img.count_in(l.x, l.y, l.x + l.w, l.y + l.h, series_colour(i));
        assert!(n >= 20, "series {i}: {n} pixels in the legend");
    }
    // The colours are distinct.
    assert_ne!(series_colour(0), series_colour(1));
    assert_ne!(series_colour(1), series_colour(2));
}

#[test]
fn legend_goes_where_it_hides_no_line() {
    // A rising line crosses the top right and bottom left corners; a falling one the others.
    for (a, b) in [(0.0, 10.0), (10.0, 0.0)] {
        let chart = diagonal();
        let mut chart = chart;
        chart.series[0].points = vec![(0.0, a), (10.0, b)];
        let f = chart.frame().unwrap();
        let l = f.legend.expect("a legend");
        for k in 0..=100 {
            let t = k as f64 / 10.0;
            let (x, y) = f.to_pixel(t, a + (b - a) * t / 10.0);
            let inside = x >= l.x as f64
                && x <= (l.x + l.w) as f64
                && y >= l.y as f64
                && y <= (l.y + l.h) as f64;
            assert!(!inside, "legend {l:?} hides ({x}, {y})");
        }
    }
}

#[test]
fn legend_keeps_off_a_reference_lines_label() {
    // A rising line leaves the top left and bottom right corners free; the label of a line
    // near the top sits at its left end, so the legend goes bottom right.
    let chart = diagonal().hline(9.5, "expected");
    let f = chart.frame().unwrap();
    let l = f.legend.expect("a legend");
    let (mid_x, mid_y) = ((f.left + f.right) / 2, (f.top + f.bottom) / 2);
    assert!(l.x > mid_x && l.y > mid_y, "legend at {l:?}, plot {f:?}");
    // Without the reference line, the first free corner in order is the top left.
    let l = diagonal().frame().unwrap().legend.unwrap();
    assert!(l.x < mid_x && l.y < mid_y, "legend at {l:?}");
}

#[test]
fn title_is_drawn_in_the_top_band() {
    // Dark pixels in rows 0..24 (the title's band) between the y axis and the right edge of
    // the plot area (the top tick's number sits left of the axis).
    let dark = |chart: &Chart| {
        let f = chart.frame().unwrap();
        let img = decode(&chart.to_png().unwrap());
        let mut n = 0;
        for y in 0..24 {
            for x in f.left..f.right {
                let p = img.px(x as i64, y).unwrap();
                if p.iter().all(|&v| v < 80) {
                    n += 1;
                }
            }
        }
        n
    };
    let with = dark(&diagonal());
    let mut untitled = diagonal();
    untitled.title.clear();
    // Without a title, the y label moves up into that band: leave it out as well.
    untitled.y_label.clear();
    assert!(with > 50, "{with} dark pixels");
    assert_eq!(dark(&untitled), 0);
}

#[test]
fn single_point_and_many_series_draw() {
    let mut chart = Chart::new("many", "x", "y").with_series(Series::new("one", vec![(3.0, 3.0)]));
    for i in 0..12 {
        chart = chart.with_series(Series::new(
            format!("s{i}"),
            vec![(0.0, i as f64), (5.0, 0.0)],
        ));
    }
    let f = chart.frame().unwrap();
    let img = decode(&chart.to_png().unwrap());
    let (x, y) = f.to_pixel(3.0, 3.0);
    // The dot may be partly covered by later series: any of its colour nearby will do.
    assert!(img.has_near(x, y, 3, series_colour(0)));
}

#[test]
fn odd_text_is_drawn_without_trouble() {
    let long = "x".repeat(500);
    let chart = Chart::new(long.clone(), "é – ü \u{1F600}", long.clone())
        .with_size(200, 160)
        .with_series(Series::new(long, vec![(0.0, 1.0), (1.0, 2.0)]));
    let img = decode(&chart.to_png().unwrap());
    assert_eq!((img.w, img.h), (200, 160));
}

fn invalid_what(r: Result<Vec<u8>, PlotError>) -> String {
    match r {
        Err(PlotError::Invalid { what, .. }) => what,
        other => panic!("expected PlotError::Invalid, got {other:?}"),
    }
}

#[test]
fn bad_input_is_refused_with_a_typed_error() {
    let ok = diagonal();
    assert!(ok.to_png().is_ok());

    let mut c = ok.clone();
    c.series.clear();
    assert_eq!(invalid_what(c.to_png()), "series");

    let mut c = ok.clone();
    c.series.push(Series::new("empty", vec![]));
    assert!(invalid_what(c.to_png()).contains("series 1"));

    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300] {
        let mut c = ok.clone();
        c.series[0].points.push((bad, 1.0));
        assert!(invalid_what(c.to_png()).contains("point 2 x"), "{bad}");
        let mut c = ok.clone();
        c.series[0].points.insert(0, (1.0, bad));
        assert!(invalid_what(c.to_png()).contains("point 0 y"), "{bad}");
    }

    for (w, h, what) in [
        (0, 400, "width"),
        (640, 0, "height"),
        (MAX_SIDE + 1, 400, "width"),
        (640, u32::MAX, "height"),
        (MAX_SIDE, MAX_SIDE, "width x height"),
    ] {
        assert_eq!(invalid_what(ok.clone().with_size(w, h).to_png()), what);
    }

    for (lo, hi) in [(5.0, 5.0), (6.0, 2.0), (f64::NAN, 1.0)] {
        let what = invalid_what(ok.clone().with_y_range(Some(lo), Some(hi)).to_png());
        assert!(what.starts_with("y_m"), "{what}");
    }
    assert!(invalid_what(ok.clone().hline(f64::NAN, "x").to_png()).contains("reference line 0"));

    // Labels that leave no room for the plot.
    let tall = ok.clone().with_size(130, 120);
    assert_eq!(invalid_what(tall.to_png()), "chart size");

    // Error messages name the expectation and the finding.
    let mut c = ok.clone();
    c.series[0].points.push((f64::NAN, 1.0));
    let msg = c.to_png().unwrap_err().to_string();
    assert!(
        msg.contains("expected a finite number") && msg.contains("found NaN"),
        "{msg}"
    );
}

#[test]
fn a_one_sided_fixed_range_beyond_the_data_still_draws() {
    let c = diagonal().with_y_range(Some(100.0), None);
    let f = c.frame().unwrap();
    assert_eq!(f.y_min, 100.0);
    assert!(f.y_max > 100.0);
    assert!(c.to_png().is_ok());
}

#[test]
fn write_png_writes_a_file_or_says_why_not() {
    let dir = std::env::temp_dir().join(format!("kavach-plot-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("chart.png");
    let chart = example_chart();
    chart.write_png(&path).unwrap();
    let img = decode(&std::fs::read(&path).unwrap());
    assert_eq!((img.w, img.h), (chart.width, chart.height));
    std::fs::remove_dir_all(&dir).unwrap();

    let missing = dir.join("no-such-dir").join("chart.png");
    match chart.write_png(&missing) {
        Err(PlotError::Write { path, .. }) => assert_eq!(path, missing),
        other => panic!("expected PlotError::Write, got {other:?}"),
    }
}

/// A chart like the ones the simulator's report draws: three tenants' bandwidth over time and
/// the model's expectation. With KAVACH_PLOT_EXAMPLE=path set, it is also written there, to be
/// looked at.
fn example_chart() -> Chart {
    let mut chart = Chart::new("DRR, weights 4:2:1", "time (s)", "bandwidth (B/s)")
        .with_size(900, 520)
        .with_y_range(Some(0.0), None);
    for (i, (name, share)) in [
        ("high", 4.0 / 7.0),
        ("medium", 2.0 / 7.0),
        ("low", 1.0 / 7.0),
    ]
    .into_iter()
    .enumerate()
    {
        let pts = (0..=60)
            .map(|t| {
                let t = t as f64 * 0.5;
                let wobble = ((t * 1.7 + i as f64).sin()) * 0.03;
                (t, 400e6 * (share + wobble))
            })
            .collect();
        chart = chart.with_series(Series::new(name, pts));
    }
    chart
        .hline(400e6 * 4.0 / 7.0, "high expected")
        .hline(400e6 / 7.0, "low expected")
}

#[test]
fn example_chart_renders() {
    let chart = example_chart();
    let bytes = chart.to_png().unwrap();
    let img = decode(&bytes);
    assert_eq!((img.w, img.h), (900, 520));
    let f = chart.frame().unwrap();
    assert_eq!(f.y_min, 0.0);
    if let Some(path) = std::env::var_os("KAVACH_PLOT_EXAMPLE") {
        std::fs::write(path, &bytes).unwrap();
    }
}

/// Tick numbers are distinct, and the x axis's do not overlap.
fn check_tick_numbers(f: &Frame) -> Result<(), String> {
    for (ticks, labels) in [(&f.x_ticks, &f.x_labels), (&f.y_ticks, &f.y_labels)] {
        if ticks.len() != labels.len() {
            return Err(format!("{ticks:?} against {labels:?}"));
        }
        for pair in labels.windows(2) {
            if pair[0] == pair[1] {
                return Err(format!("repeated tick number in {labels:?}"));
            }
        }
    }
    if f.x_ticks.len() > 3 {
        for k in 1..f.x_ticks.len() {
            let gap = f.to_pixel(f.x_ticks[k], 0.0).0 - f.to_pixel(f.x_ticks[k - 1], 0.0).0;
            let need = (text_width(&f.x_labels[k]) + text_width(&f.x_labels[k - 1])) as f64 / 2.0;
            if gap <= need {
                return Err(format!("x numbers overlap: {:?}", f.x_labels));
            }
        }
    }
    Ok(())
}

#[test]
fn tick_numbers_are_distinct_and_readable() {
    for (lo, hi) in [
        (1.00001e-5, 1.00002e-5),
        (1e9, 1e9 + 100.0),
        (-1.5e-7, 2.5e-7),
        (123456.0, 123457.0),
        (0.0, 1e18),
    ] {
        let c = Chart::new("t", "x", "y").with_series(Series::new("", vec![(lo, lo), (hi, hi)]));
        let f = c.frame().unwrap();
        check_tick_numbers(&f).unwrap();
        assert!(c.to_png().is_ok());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random finite series of moderate magnitude always draw, at the requested size.
    #[test]
    fn random_finite_series_draw(
        series in prop::collection::vec(
            prop::collection::vec((-1e9f64..1e9, -1e9f64..1e9), 1..40), 1..5),
        w in 200u32..900,
        h in 160u32..600,
        fixed in prop::option::of((-1e9f64..1e9, 1e-3f64..1e9)),
    ) {
        let mut chart = Chart::new("random", "x", "y").with_size(w, h);
        for (i, pts) in series.into_iter().enumerate() {
            chart = chart.with_series(Series::new(format!("s{i}"), pts));
        }
        if let Some((lo, span)) = fixed {
            chart = chart.with_y_range(Some(lo), Some(lo + span));
        }
        let img = decode(&chart.to_png().unwrap());
        prop_assert_eq!((img.w, img.h), (w, h));
    }

    /// Values of any magnitude within the limits, near each other or far apart, draw, with
    /// readable tick numbers.
    #[test]
    fn values_of_any_scale_draw(
        pts in prop::collection::vec(
            ((any::<bool>(), -30f64..18.0), (any::<bool>(), -30f64..18.0)), 1..20),
        offset in prop::option::of(-30f64..17.0),
    ) {
        let v = |(neg, e): (bool, f64)| if neg { -(10f64.powf(e)) } else { 10f64.powf(e) };
        // With an offset, all points lie within a millionth of it: a narrow range far from
        // zero (or, where that is below the 1e-9 relative limit, a single value).
        let base = offset.map(|e| 10f64.powf(e)).unwrap_or(0.0);
        let pts: Vec<(f64, f64)> = pts
            .into_iter()
            .map(|(x, y)| match offset {
                Some(_) => (
                    base * (1.0 + v(x) * 1e-24),
                    base * (1.0 + v(y) * 1e-24),
                ),
                None => (v(x), v(y)),
            })
            .collect();
        let chart = Chart::new("scale", "x", "y").with_size(640, 400)
            .with_series(Series::new("s", pts));
        let f = chart.frame().unwrap();
        prop_assert!(check_tick_numbers(&f).is_ok(), "{:?}", check_tick_numbers(&f));
        prop_assert_eq!(decode(&chart.to_png().unwrap()).w, 640);
    }

    /// Any finite values at all (up to f64::MAX) never panic: they draw or are refused.
    #[test]
    fn any_finite_values_never_panic(
        pts in prop::collection::vec((any::<f64>(), any::<f64>()), 1..20),
        hl in any::<f64>(),
    ) {
        let pts: Vec<(f64, f64)> = pts.into_iter().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
        prop_assume!(!pts.is_empty());
        let chart = Chart::new("any", "x", "y").with_size(300, 200)
            .with_series(Series::new("s", pts)).hline(hl, "h");
        match chart.to_png() {
            Ok(bytes) => prop_assert_eq!(decode(&bytes).w, 300),
            Err(PlotError::Invalid { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

#[test]
fn dense_sorted_series_draws_like_the_full_path() {
    // 40 000 points over ~800 columns, with noise: drawn in x order the series is thinned
    // (each eighth of a pixel column keeps four points); drawn backwards (x decreasing) every
    // segment is drawn. The pictures agree up to the shade of some edge pixels.
    let pts: Vec<(f64, f64)> = (0..40_000)
        .map(|i| {
            let x = i as f64 * 0.001;
            (x, (x * 3.0).sin() + ((i * 7919) % 101) as f64 * 0.004)
        })
        .collect();
    let mut backwards = pts.clone();
    backwards.reverse();
    let draw = |p: Vec<(f64, f64)>| {
        let c = Chart::new("dense", "x", "y")
            .with_size(900, 500)
            .with_series(Series::new("", p));
        decode(&c.to_png().unwrap())
    };
    let (a, b) = (draw(pts), draw(backwards));
    let inked = a.count_in(0, 0, a.w, a.h, series_colour(0));
    assert!(inked > 5_000, "{inked} pixels of the series colour");
    let mut differ = 0;
    for (p, q) in a.rgb.chunks(3).zip(b.rgb.chunks(3)) {
        if p != q {
            differ += 1;
        }
        for (u, v) in p.iter().zip(q) {
            assert!(u.abs_diff(*v) < 32, "{p:?} against {q:?}");
        }
    }
    assert!(differ * 5 < inked, "{differ} pixels differ, {inked} inked");
}
