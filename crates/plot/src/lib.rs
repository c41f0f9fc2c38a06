//! Line charts rendered to PNG without any drawing library: a small RGB rasterizer, a built-in
//! 5x7 bitmap font (drawn at twice its size), and the `png` crate for the encoding only.
//!
//! A [`Chart`] holds one or more [`Series`] of `(x, y)` points, an optional fixed y range and
//! optional horizontal reference lines ([`Chart::hline`], e.g. the throughput a model expects).
//! [`Chart::to_png`] draws:
//!
//! - the title (top, centred), the y axis label (horizontal, above the y axis) and the x axis
//!   label (bottom, centred);
//! - both axes with tick marks on "nice" values (1, 2 or 5 times a power of ten), their numbers
//!   (large values with an SI suffix: k, M, G, T, P, E; tiny ones in exponent notation) and a
//!   light grid;
//! - each series as an anti-aliased polyline 2 px wide, in its own colour from a palette chosen
//!   to stay distinguishable with the common forms of colour blindness (Okabe and Ito's); past
//!   the palette's seven colours the colours repeat with a dashed line. A series of one point is
//!   drawn as a dot;
//! - reference lines dashed in grey, under the data, with their label above the line's left
//!   end (over the data, with a thin white halo);
//! - a legend box in the corner of the plot area where it hides the least of the lines (it
//!   may still hide some).
//!
//! What is checked, with a typed [`PlotError`] and never a panic: at least one series, no empty
//! series, every coordinate finite and of magnitude at most [`MAX_ABS`], at most [`MAX_POINTS`]
//! points in all, each side between [`MIN_SIDE`] and [`MAX_SIDE`] pixels and at most
//! [`MAX_PIXELS`] pixels in all, a fixed y range that is finite and not empty, and room left for
//! the plot area once the labels are placed. Text is ASCII; any other character is drawn as `?`,
//! and text too long for the image is cut short with `...`. Points outside a fixed y range are
//! clipped at the plot area's edge.
//!
//! The cost of drawing is proportional to the pixel length of the lines drawn (each segment
//! visits only the pixels near it), plus the image size. A series whose x values never
//! decrease is first thinned to at most 32 points a pixel column (see `Frame::pixel_path`),
//! so dense time series cost no more than the image's width allows (a million-point zigzag on
//! 900 x 520: about 0.7 s in an optimised build); a series that goes back and forth in x is
//! drawn segment by segment (100 000 random points on 900 x 520: about 2 s). Drawing is
//! deterministic: the same chart gives the same bytes.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

/// Why a chart could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The chart's description is unusable: `what` names the field (and series or point).
    #[error("plot: {what}: expected {expected}, found {found}")]
    Invalid {
        what: String,
        expected: String,
        found: String,
    },
    /// The PNG encoder failed.
    #[error("plot: encoding the PNG: {0}")]
    Encode(String),
    /// Writing the file failed.
    #[error("plot: writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn invalid(
    what: impl Into<String>,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> PlotError {
    PlotError::Invalid {
        what: what.into(),
        expected: expected.into(),
        found: found.into(),
    }
}

/// Smallest accepted width or height, in pixels.
pub const MIN_SIDE: u32 = 120;
/// Largest accepted width or height, in pixels.
pub const MAX_SIDE: u32 = 8192;
/// Largest accepted width x height (the RGB buffer is 3 bytes a pixel, plus 1 byte a pixel
/// while drawing).
pub const MAX_PIXELS: u64 = 32 << 20;
/// Largest accepted number of points over all series.
pub const MAX_POINTS: usize = 1_000_000;
/// Largest accepted magnitude of a coordinate (or of a fixed y range or a reference line).
pub const MAX_ABS: f64 = 1e18;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend's text for this line.
    pub label: String,
    /// `(x, y)` points, joined in this order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            label: label.into(),
            points,
        }
    }
}

/// A horizontal reference line at `value` on the y axis.
#[derive(Debug, Clone, PartialEq)]
pub struct HLine {
    pub value: f64,
    pub label: String,
}

/// A line chart. Build it with [`Chart::new`] and the `with_*` methods, or as a struct literal
/// ending in `..Default::default()`.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
    /// Fixes the bottom of the y axis (otherwise: the data's minimum, rounded down to a tick).
    pub y_min: Option<f64>,
    /// Fixes the top of the y axis (otherwise: the data's maximum, rounded up to a tick).
    pub y_max: Option<f64>,
    /// Horizontal reference lines; the automatic y range includes them.
    pub hlines: Vec<HLine>,
}

impl Default for Chart {
    /// An empty 800 x 480 chart (it needs a series before it can be drawn).
    fn default() -> Chart {
        Chart {
            title: String::new(),
            x_label: String::new(),
            y_label: String::new(),
            series: Vec::new(),
            width: 800,
            height: 480,
            y_min: None,
            y_max: None,
            hlines: Vec::new(),
        }
    }
}

/// A rectangle in pixels: columns `x..x + w`, rows `y..y + h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
}

/// Where a chart's parts land in the image: the plot area, the axis ranges and ticks, and the
/// legend. The plot area spans the continuous coordinates `left..=right` and `top..=bottom`
/// (pixel column `c` covers `c..c + 1`); the x axis is drawn on row `bottom` and the y axis on
/// column `left - 1`.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub left: u32,
    pub top: u32,
    pub right: u32,
    pub bottom: u32,
    pub x_min: f64,
    pub x_max: f64,
    pub y_min: f64,
    pub y_max: f64,
    /// The values that get a tick and a number, ascending.
    pub x_ticks: Vec<f64>,
    pub y_ticks: Vec<f64>,
    /// The distance between two ticks (1, 2 or 5 times a power of ten).
    pub x_step: f64,
    pub y_step: f64,
    /// The numbers written at the ticks, one per tick.
    pub x_labels: Vec<String>,
    pub y_labels: Vec<String>,
    /// The legend box, if any series has a label.
    pub legend: Option<Rect>,
}

impl Frame {
    /// The continuous image coordinates of data point `(x, y)` (not clipped to the plot area).
    pub fn to_pixel(&self, x: f64, y: f64) -> (f64, f64) {
        let px = self.left as f64
            + (x - self.x_min) / (self.x_max - self.x_min) * (self.right - self.left) as f64;
        let py = self.bottom as f64
            - (y - self.y_min) / (self.y_max - self.y_min) * (self.bottom - self.top) as f64;
        (px, py)
    }
}

impl Frame {
    /// `points` in image coordinates. When the x values never decrease and there are more than
    /// four points per eighth of a pixel column, each eighth keeps only its first, lowest,
    /// highest and last point (in their order): the same pixels get covered, up to the shade
    /// of some edge pixels (an edge moves by less than an eighth of a pixel), at a cost
    /// bounded by the width instead of the number of points.
    fn pixel_path(&self, points: &[(f64, f64)]) -> Vec<(f64, f64)> {
        const SLICES: f64 = 8.0;
        let mapped = points.iter().map(|&(x, y)| self.to_pixel(x, y));
        let columns = ((self.right - self.left) as usize + 1) * SLICES as usize;
        let sorted = points.windows(2).all(|w| w[0].0 <= w[1].0);
        if points.len() <= 4 * columns || !sorted {
            return mapped.collect();
        }
        let mut out = Vec::with_capacity(4 * columns + 4);
        let mut bucket: Vec<(f64, f64)> = Vec::new();
        let flush = |bucket: &mut Vec<(f64, f64)>, out: &mut Vec<(f64, f64)>| {
            if bucket.is_empty() {
                return;
            }
            let (mut lo, mut hi) = (0, 0);
            for (i, p) in bucket.iter().enumerate() {
                if p.1 < bucket[lo].1 {
                    lo = i;
                }
                if p.1 > bucket[hi].1 {
                    hi = i;
                }
            }
            let mut keep = [0, lo, hi, bucket.len() - 1];
            keep.sort_unstable();
            let mut last = usize::MAX;
            for k in keep {
                if k != last {
                    out.push(bucket[k]);
                    last = k;
                }
            }
            bucket.clear();
        };
        let mut column = f64::NAN;
        for p in mapped {
            let c = (p.0 * SLICES).floor();
            if c != column {
                flush(&mut bucket, &mut out);
                column = c;
            }
            bucket.push(p);
        }
        flush(&mut bucket, &mut out);
        out
    }
}

/// An RGB colour.
pub type Rgb = [u8; 3];

/// Okabe and Ito's palette without its yellow (too faint on white), in the order used.
const PALETTE: [Rgb; 7] = [
    [0, 114, 178],   // blue
    [213, 94, 0],    // vermillion
    [0, 158, 115],   // bluish green
    [204, 121, 167], // reddish purple
    [230, 159, 0],   // orange
    [86, 180, 233],  // sky blue
    [0, 0, 0],       // black
];

/// The colour of series number `index` (from 0).
pub fn series_colour(index: usize) -> Rgb {
    PALETTE[index % PALETTE.len()]
}

/// Whether series number `index` is drawn dashed (once the palette has been used up).
pub fn series_dashed(index: usize) -> bool {
    index >= PALETTE.len()
}

/// The colour of reference lines and their labels.
pub const HLINE_COLOUR: Rgb = [100, 100, 100];
const WHITE: Rgb = [255, 255, 255];
const TEXT: Rgb = [20, 20, 20];
const AXIS: Rgb = [0, 0, 0];
const GRID: Rgb = [225, 225, 225];
const LEGEND_BORDER: Rgb = [150, 150, 150];

/// Line width of a series, in pixels.
const LINE_WIDTH: f64 = 2.0;
const MARGIN: u32 = 10;
const TICK_LEN: u32 = 6;
const GAP: u32 = 6;
const DASH_ON: f64 = 8.0;
const DASH_PERIOD: f64 = 13.0;

impl Chart {
    /// A chart with these labels, no series, 800 x 480 pixels.
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Chart {
        Chart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            ..Chart::default()
        }
    }

    /// Sets the image size in pixels.
    pub fn with_size(mut self, width: u32, height: u32) -> Chart {
        self.width = width;
        self.height = height;
        self
    }

    /// Adds a series.
    pub fn with_series(mut self, series: Series) -> Chart {
        self.series.push(series);
        self
    }

    /// Fixes either end of the y axis (`None` leaves that end automatic).
    pub fn with_y_range(mut self, min: Option<f64>, max: Option<f64>) -> Chart {
        self.y_min = min;
        self.y_max = max;
        self
    }

    /// Adds a horizontal reference line at `value`, labelled `label`.
    pub fn hline(mut self, value: f64, label: impl Into<String>) -> Chart {
        self.hlines.push(HLine {
            value,
            label: label.into(),
        });
        self
    }

    fn validate(&self) -> Result<(), PlotError> {
        for (what, v) in [("width", self.width), ("height", self.height)] {
            if !(MIN_SIDE..=MAX_SIDE).contains(&v) {
                return Err(invalid(
                    what,
                    format!("{MIN_SIDE}..={MAX_SIDE} pixels"),
                    v.to_string(),
                ));
            }
        }
        let pixels = self.width as u64 * self.height as u64;
        if pixels > MAX_PIXELS {
            return Err(invalid(
                "width x height",
                format!("at most {MAX_PIXELS} pixels"),
                format!("{} x {} = {pixels}", self.width, self.height),
            ));
        }
        if self.series.is_empty() {
            return Err(invalid("series", "at least one series", "none"));
        }
        let mut total = 0usize;
        for (i, s) in self.series.iter().enumerate() {
            if s.points.is_empty() {
                return Err(invalid(
                    format!("series {i} ({:?})", s.label),
                    "at least one point",
                    "no points",
                ));
            }
            total = total.saturating_add(s.points.len());
            for (j, &(x, y)) in s.points.iter().enumerate() {
                for (axis, v) in [("x", x), ("y", y)] {
                    if !(v.is_finite() && v.abs() <= MAX_ABS) {
                        return Err(invalid(
                            format!("series {i} ({:?}) point {j} {axis}", s.label),
                            format!("a finite number of magnitude at most {MAX_ABS:e}"),
                            v.to_string(),
                        ));
                    }
                }
            }
        }
        if total > MAX_POINTS {
            return Err(invalid(
                "points over all series",
                format!("at most {MAX_POINTS}"),
                total.to_string(),
            ));
        }
        for (what, v) in [("y_min", self.y_min), ("y_max", self.y_max)] {
            if let Some(v) = v {
                if !(v.is_finite() && v.abs() <= MAX_ABS) {
                    return Err(invalid(
                        what,
                        format!("a finite number of magnitude at most {MAX_ABS:e}"),
                        v.to_string(),
                    ));
                }
            }
        }
        if let (Some(lo), Some(hi)) = (self.y_min, self.y_max) {
            if degenerate(lo, hi) {
                return Err(invalid(
                    "y_min..y_max",
                    "y_min below y_max by more than 1e-9 of their magnitude (and 1e-100)",
                    format!("{lo}..{hi}"),
                ));
            }
        }
        for (i, h) in self.hlines.iter().enumerate() {
            if !(h.value.is_finite() && h.value.abs() <= MAX_ABS) {
                return Err(invalid(
                    format!("reference line {i} ({:?})", h.label),
                    format!("a finite number of magnitude at most {MAX_ABS:e}"),
                    h.value.to_string(),
                ));
            }
        }
        Ok(())
    }

    /// Validates the chart and places its parts (see [`Frame`]); `to_png` draws this layout.
    pub fn frame(&self) -> Result<Frame, PlotError> {
        self.validate()?;
        let (w, h) = (self.width, self.height);
        let mut x_lo = f64::INFINITY;
        let mut x_hi = f64::NEG_INFINITY;
        let mut y_lo = f64::INFINITY;
        let mut y_hi = f64::NEG_INFINITY;
        for &(x, y) in self.series.iter().flat_map(|s| s.points.iter()) {
            x_lo = x_lo.min(x);
            x_hi = x_hi.max(x);
            y_lo = y_lo.min(y);
            y_hi = y_hi.max(y);
        }
        for hl in &self.hlines {
            y_lo = y_lo.min(hl.value);
            y_hi = y_hi.max(hl.value);
        }

        // Vertical layout: title, y label, plot area, tick numbers, x label.
        let mut top = MARGIN;
        if !self.title.is_empty() {
            top += TEXT_H + 10;
        }
        if !self.y_label.is_empty() {
            top += TEXT_H + 14; // clear of the top tick's number
        }
        top = top.max(MARGIN + TEXT_H); // room for the top tick's number
        let mut below = MARGIN + TICK_LEN + 4 + TEXT_H;
        if !self.x_label.is_empty() {
            below += GAP + TEXT_H;
        }
        let too_small = |pw: i64, ph: i64| {
            invalid(
                "chart size",
                "room for a plot area of at least 40 x 40 pixels besides the labels",
                format!("{w} x {h} leaves {pw} x {ph}"),
            )
        };
        let bottom = h as i64 - below as i64;
        let plot_h = bottom - top as i64;
        if plot_h < 40 {
            return Err(too_small(-1, plot_h));
        }
        let bottom = bottom as u32;
        let plot_h = plot_h as u32;

        let y_target = (plot_h / 50).clamp(2, 10);
        let y_axis = nice_axis(y_lo, y_hi, self.y_min, self.y_max, y_target, "y axis")?;
        let y_labels = tick_labels(&y_axis.ticks, y_axis.step);
        let y_label_w = y_labels.iter().map(|s| text_width(s)).max().unwrap_or(0);
        let left = MARGIN + y_label_w + 4 + TICK_LEN;

        // The right margin leaves room for half the last x number; the numbers depend on the
        // ticks, which depend on the width: settle it in two rounds.
        let mut right_margin = MARGIN + 16;
        let mut x_axis = None;
        for _ in 0..2 {
            let plot_w = w as i64 - left as i64 - right_margin as i64;
            if plot_w < 40 {
                return Err(too_small(plot_w, plot_h as i64));
            }
            // Fewer ticks until their numbers stand apart (or only two or three are left:
            // a target of one tick step over the data gives at most three ticks).
            let mut x_target = (plot_w as u32 / 100).clamp(2, 10);
            let (axis, labels) = loop {
                let axis = nice_axis(x_lo, x_hi, None, None, x_target, "x axis")?;
                let labels = tick_labels(&axis.ticks, axis.step);
                let widest = labels.iter().map(|s| text_width(s)).max().unwrap_or(0);
                let spacing = plot_w as f64 * axis.step / (axis.max - axis.min);
                if x_target == 1 || widest as f64 + 2.0 * ADVANCE as f64 <= spacing {
                    break (axis, labels);
                }
                x_target -= 1;
            };
            let last_w = labels.last().map(|s| text_width(s)).unwrap_or(0);
            right_margin = right_margin.max(MARGIN + last_w / 2 + 2);
            x_axis = Some((axis, labels));
        }
        let plot_w = w as i64 - left as i64 - right_margin as i64;
        if plot_w < 40 {
            return Err(too_small(plot_w, plot_h as i64));
        }
        let right = w - right_margin;
        let (x_axis, x_labels) = x_axis.ok_or_else(|| invalid("x axis", "ticks", "none"))?;

        let mut frame = Frame {
            left,
            top,
            right,
            bottom,
            x_min: x_axis.min,
            x_max: x_axis.max,
            y_min: y_axis.min,
            y_max: y_axis.max,
            x_ticks: x_axis.ticks,
            y_ticks: y_axis.ticks,
            x_step: x_axis.step,
            y_step: y_axis.step,
            x_labels,
            y_labels,
            legend: None,
        };
        if let Some(l) = legend_layout(&self.series, left, top, right, bottom) {
            frame.legend = Some(self.place_legend(&frame, l.w, l.h));
        }
        Ok(frame)
    }

    /// The corner of the plot area for a `w` x `h` legend that hides the least of the data
    /// (sampled every few pixels along the lines); ties go to top right, top left, bottom
    /// right, bottom left in that order.
    fn place_legend(&self, f: &Frame, w: u32, h: u32) -> Rect {
        let (x_l, x_r) = (f.left + 4, f.right - 4 - w);
        let (y_t, y_b) = (f.top + 4, f.bottom - 4 - h);
        let corners = [(x_r, y_t), (x_l, y_t), (x_r, y_b), (x_l, y_b)];
        let mut hidden = [0u64; 4];
        let clip = ClipRect {
            x0: f.left as f64,
            y0: f.top as f64,
            x1: f.right as f64,
            y1: f.bottom as f64,
        };
        let mut count = |x: f64, y: f64| {
            for (k, &(cx, cy)) in corners.iter().enumerate() {
                // A margin of a few pixels: a line just outside the box also crowds it.
                let (x0, y0) = (cx as f64 - 3.0, cy as f64 - 3.0);
                if x >= x0 && x <= x0 + w as f64 + 6.0 && y >= y0 && y <= y0 + h as f64 + 6.0 {
                    hidden[k] += 1;
                }
            }
        };
        for s in &self.series {
            let pts = f.pixel_path(&s.points);
            if pts.len() == 1 {
                count(pts[0].0, pts[0].1);
            }
            for seg in pts.windows(2) {
                let (a, b) = (seg[0], seg[1]);
                if let Some((t0, t1)) = clip_segment(a, b, &clip) {
                    let len = ((b.0 - a.0).powi(2) + (b.1 - a.1).powi(2)).sqrt() * (t1 - t0);
                    let n = (len / 3.0).ceil().clamp(1.0, 1e5) as u32;
                    for k in 0..=n {
                        let t = t0 + (t1 - t0) * k as f64 / n as f64;
                        count(a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1));
                    }
                }
            }
        }
        // A reference line's label under the legend would be lost: weigh it heavily.
        for hl in &self.hlines {
            if let Some((label, tx, ty)) = hline_label(f, hl) {
                let (tx1, ty1) = (tx + text_width(&label) as i64, ty + TEXT_H as i64);
                for (k, &(cx, cy)) in corners.iter().enumerate() {
                    let (cx, cy) = (cx as i64, cy as i64);
                    let (cx1, cy1) = (cx + w as i64, cy + h as i64);
                    if tx < cx1 && cx < tx1 && ty < cy1 && cy < ty1 {
                        hidden[k] += 1 << 32;
                    }
                }
            }
        }
        let best = (0..4).min_by_key(|&k| (hidden[k], k)).unwrap_or(0);
        Rect {
            x: corners[best].0,
            y: corners[best].1,
            w,
            h,
        }
    }

    /// Draws the chart into an RGB buffer (3 bytes a pixel, rows top to bottom).
    pub fn to_rgb(&self) -> Result<Vec<u8>, PlotError> {
        let f = self.frame()?;
        let mut c = Canvas::new(self.width, self.height);
        let (left, top, right, bottom) = (f.left, f.top, f.right, f.bottom);

        // Grid and tick numbers.
        for (&v, label) in f.y_ticks.iter().zip(&f.y_labels) {
            let row = f.to_pixel(f.x_min, v).1.floor() as i64;
            let row = row.clamp(top as i64, bottom as i64);
            c.fill(left as i64, row, right as i64, row + 1, GRID);
            c.fill(
                left as i64 - 1 - TICK_LEN as i64,
                row,
                left as i64 - 1,
                row + 1,
                AXIS,
            );
            let tw = text_width(label) as i64;
            let tx = left as i64 - 1 - TICK_LEN as i64 - 4 - tw;
            c.text(tx, row - TEXT_H as i64 / 2, label, TEXT);
        }
        for (&v, label) in f.x_ticks.iter().zip(&f.x_labels) {
            let col = f.to_pixel(v, f.y_min).0.floor() as i64;
            let col = col.clamp(left as i64 - 1, right as i64);
            c.fill(col, top as i64, col + 1, bottom as i64, GRID);
            c.fill(
                col,
                bottom as i64 + 1,
                col + 1,
                (bottom + 1 + TICK_LEN) as i64,
                AXIS,
            );
            let tw = text_width(label) as i64;
            // Centred under the tick, but kept inside the image.
            let tx = (col - tw / 2).min(self.width as i64 - 2 - tw).max(2);
            c.text(tx, (bottom + 1 + TICK_LEN + 4) as i64, label, TEXT);
        }

        let clip = ClipRect {
            x0: left as f64,
            y0: top as f64,
            x1: right as f64,
            y1: bottom as f64,
        };

        // Reference lines, under the data.
        for hl in &self.hlines {
            let y = f.to_pixel(f.x_min, hl.value).1;
            c.polyline(&[(clip.x0, y), (clip.x1, y)], LINE_WIDTH / 2.0, &clip, true);
            c.flush(HLINE_COLOUR);
        }

        // The data.
        for (i, s) in self.series.iter().enumerate() {
            let pts = f.pixel_path(&s.points);
            if pts.len() == 1 {
                c.dot(pts[0], 3.0, &clip);
            } else {
                c.polyline(&pts, LINE_WIDTH / 2.0, &clip, series_dashed(i));
            }
            c.flush(series_colour(i));
        }

        // Reference lines' labels, over the data.
        for hl in &self.hlines {
            if let Some((label, tx, ty)) = hline_label(&f, hl) {
                // A white halo keeps the text legible over the lines and hides little of them.
                for (dx, dy) in [
                    (-1, 0),
                    (1, 0),
                    (0, -1),
                    (0, 1),
                    (-1, -1),
                    (1, 1),
                    (-1, 1),
                    (1, -1),
                ] {
                    c.text(tx + dx, ty + dy, &label, WHITE);
                }
                c.text(tx, ty, &label, HLINE_COLOUR);
            }
        }

        // Axes.
        c.fill(
            left as i64 - 1,
            top as i64,
            left as i64,
            bottom as i64 + 1,
            AXIS,
        );
        c.fill(
            left as i64 - 1,
            bottom as i64,
            right as i64 + 1,
            bottom as i64 + 1,
            AXIS,
        );

        // Legend.
        if let (Some(l), Some(r)) = (
            legend_layout(&self.series, left, top, right, bottom),
            f.legend,
        ) {
            let (x0, y0) = (r.x as i64, r.y as i64);
            let (x1, y1) = (x0 + r.w as i64, y0 + r.h as i64);
            c.fill(x0, y0, x1, y1, WHITE);
            c.fill(x0, y0, x1, y0 + 1, LEGEND_BORDER);
            c.fill(x0, y1 - 1, x1, y1, LEGEND_BORDER);
            c.fill(x0, y0, x0 + 1, y1, LEGEND_BORDER);
            c.fill(x1 - 1, y0, x1, y1, LEGEND_BORDER);
            let whole = ClipRect {
                x0: 0.0,
                y0: 0.0,
                x1: self.width as f64,
                y1: self.height as f64,
            };
            for (row, (i, label)) in l.rows.iter().enumerate() {
                let ty = y0 + LEGEND_PAD as i64 + row as i64 * LEGEND_ROW as i64;
                let sx = (x0 + LEGEND_PAD as i64) as f64;
                if let Some(i) = i {
                    let sy = ty as f64 + TEXT_H as f64 / 2.0;
                    c.polyline(
                        &[(sx, sy), (sx + LEGEND_SAMPLE as f64, sy)],
                        LINE_WIDTH / 2.0,
                        &whole,
                        series_dashed(*i),
                    );
                    c.flush(series_colour(*i));
                }
                let tx = x0 + (LEGEND_PAD + LEGEND_SAMPLE + GAP) as i64;
                c.text(tx, ty, label, TEXT);
            }
        }

        // Title and axis labels.
        if !self.title.is_empty() {
            let t = fit_text(&self.title, self.width - 2 * MARGIN);
            let tw = text_width(&t) as i64;
            c.text((self.width as i64 - tw) / 2, MARGIN as i64, &t, TEXT);
        }
        if !self.y_label.is_empty() {
            let t = fit_text(&self.y_label, self.width - 2 * MARGIN);
            let y = top as i64 - 14 - TEXT_H as i64;
            c.text(MARGIN as i64, y, &t, TEXT);
        }
        if !self.x_label.is_empty() {
            let t = fit_text(&self.x_label, self.width - 2 * MARGIN);
            let tw = text_width(&t) as i64;
            let cx = (left as i64 + right as i64) / 2;
            let x = (cx - tw / 2).clamp(
                MARGIN as i64,
                (self.width as i64 - MARGIN as i64 - tw).max(0),
            );
            let y = self.height as i64 - MARGIN as i64 - TEXT_H as i64;
            c.text(x, y, &t, TEXT);
        }
        Ok(c.px)
    }

    /// The chart as a PNG file's bytes (8-bit RGB).
    pub fn to_png(&self) -> Result<Vec<u8>, PlotError> {
        let rgb = self.to_rgb()?;
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, self.width, self.height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc
            .write_header()
            .map_err(|e| PlotError::Encode(e.to_string()))?;
        writer
            .write_image_data(&rgb)
            .map_err(|e| PlotError::Encode(e.to_string()))?;
        writer
            .finish()
            .map_err(|e| PlotError::Encode(e.to_string()))?;
        Ok(out)
    }

    /// Writes the chart as a PNG file at `path` (created or replaced; not atomically).
    pub fn write_png(&self, path: &Path) -> Result<(), PlotError> {
        let bytes = self.to_png()?;
        std::fs::write(path, bytes).map_err(|source| PlotError::Write {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// A reference line's label as written (cut to fit) and its top left corner: above the
/// line's left end, or below it when there is no room above. None when the line has no label
/// or lies outside the plot area (a fixed y range).
fn hline_label(f: &Frame, hl: &HLine) -> Option<(String, i64, i64)> {
    let y = f.to_pixel(f.x_min, hl.value).1;
    if hl.label.is_empty() || !(y >= f.top as f64 && y <= f.bottom as f64) {
        return None;
    }
    let label = fit_text(&hl.label, (f.right - f.left).saturating_sub(12));
    let mut ty = y.floor() as i64 - 4 - TEXT_H as i64;
    if ty < f.top as i64 + 2 {
        ty = y.floor() as i64 + 5;
    }
    Some((label, f.left as i64 + 6, ty))
}

/// Whether `lo..hi` is too narrow (or reversed) to put ticks on.
fn degenerate(lo: f64, hi: f64) -> bool {
    let mag = lo.abs().max(hi.abs());
    // NaN compares false, so a NaN span counts as degenerate.
    let enough = hi - lo >= (mag * 1e-9).max(1e-100);
    !enough
}

struct Axis {
    min: f64,
    max: f64,
    step: f64,
    ticks: Vec<f64>,
}

/// 1, 2 or 5 times a power of ten, at least `raw` (`raw` > 0 and finite).
fn nice_step(raw: f64) -> f64 {
    let k = raw.log10().floor();
    let p = 10f64.powi(k as i32);
    let f = raw / p;
    let m = if f <= 1.0 + 1e-9 {
        1.0
    } else if f <= 2.0 + 1e-9 {
        2.0
    } else if f <= 5.0 + 1e-9 {
        5.0
    } else {
        10.0
    };
    m * p
}

/// An axis over the data range `lo..=hi` (ends overridden by `fixed_*`), about `target` ticks.
fn nice_axis(
    lo: f64,
    hi: f64,
    fixed_lo: Option<f64>,
    fixed_hi: Option<f64>,
    target: u32,
    what: &str,
) -> Result<Axis, PlotError> {
    let mut a = fixed_lo.unwrap_or(lo);
    let mut b = fixed_hi.unwrap_or(hi);
    if degenerate(a, b) {
        let mag = a.abs().max(b.abs());
        let pad = if mag >= 1e-100 { mag * 0.1 } else { 1.0 };
        match (fixed_lo, fixed_hi) {
            (Some(_), None) => b = a + pad,
            (None, Some(_)) => a = b - pad,
            _ => {
                let c = a / 2.0 + b / 2.0;
                a = c - pad;
                b = c + pad;
            }
        }
    }
    let step = nice_step((b - a) / target.max(1) as f64);
    if !(step.is_finite() && step > 0.0 && a.is_finite() && b.is_finite()) {
        return Err(invalid(
            what,
            "a range that can carry ticks",
            format!("{a}..{b}"),
        ));
    }
    if fixed_lo.is_none() {
        a = (a / step).floor() * step;
    }
    if fixed_hi.is_none() {
        b = (b / step).ceil() * step;
    }
    if degenerate(a, b) {
        return Err(invalid(
            what,
            "a range that can carry ticks",
            format!("{a}..{b}"),
        ));
    }
    let n0 = (a / step - 1e-6).ceil();
    let n1 = (b / step + 1e-6).floor();
    let mut ticks = Vec::new();
    let mut n = n0;
    while n <= n1 && ticks.len() < 64 {
        let t = n * step + 0.0; // + 0.0 turns -0 into 0
        let slack = step * 1e-6;
        if t >= a - slack && t <= b + slack {
            ticks.push(t.clamp(a, b));
        }
        n += 1.0;
    }
    Ok(Axis {
        min: a,
        max: b,
        step,
        ticks,
    })
}

/// The numbers written at the ticks: enough decimals to tell neighbours apart, an SI suffix
/// from ten thousand up, exponent notation when the step is below 1e-4.
fn tick_labels(ticks: &[f64], step: f64) -> Vec<String> {
    const SUFFIX: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    let mag = ticks.iter().fold(0f64, |m, t| m.max(t.abs()));
    let decimals = |s: f64| -> usize {
        if s >= 1.0 {
            0
        } else {
            ((-s.log10()) - 1e-9).ceil().clamp(0.0, 12.0) as usize
        }
    };
    ticks
        .iter()
        .map(|&t| {
            let s = if t == 0.0 {
                "0".to_string()
            } else if mag >= 1e4 {
                let k = ((mag.log10() / 3.0).floor() as usize).clamp(1, SUFFIX.len() - 1);
                let scale = 1000f64.powi(k as i32);
                let d = decimals(step / scale);
                format!("{:.*}{}", d, t / scale, SUFFIX[k])
            } else if mag == 0.0 || step >= 1e-4 {
                format!("{:.*}", decimals(step), t)
            } else {
                // Enough digits after the mantissa's point to tell steps apart.
                let digits = ((mag / step).log10() - 1e-9).ceil().clamp(1.0, 12.0) as usize;
                format!("{t:.digits$e}")
            };
            match s.strip_prefix('-') {
                Some(rest) if rest.chars().all(|c| matches!(c, '0' | '.')) => rest.to_string(),
                _ => s,
            }
        })
        .collect()
}

const LEGEND_PAD: u32 = 6;
const LEGEND_ROW: u32 = TEXT_H + 6;
const LEGEND_SAMPLE: u32 = 24;

struct Legend {
    w: u32,
    h: u32,
    /// (series index, or None for the "+N more" row; text)
    rows: Vec<(Option<usize>, String)>,
}

fn legend_layout(
    series: &[Series],
    left: u32,
    top: u32,
    right: u32,
    bottom: u32,
) -> Option<Legend> {
    if series.iter().all(|s| s.label.is_empty()) {
        return None;
    }
    let plot_w = right.saturating_sub(left);
    let plot_h = bottom.saturating_sub(top);
    let fixed_w = 2 * LEGEND_PAD + LEGEND_SAMPLE + GAP;
    let max_text = plot_w.saturating_sub(8 + fixed_w);
    if max_text < ADVANCE * 4 {
        return None;
    }
    let fit_rows = (plot_h.saturating_sub(8 + 2 * LEGEND_PAD) / LEGEND_ROW) as usize;
    if fit_rows == 0 {
        return None;
    }
    let mut rows: Vec<(Option<usize>, String)> = Vec::new();
    let shown = if series.len() <= fit_rows {
        series.len()
    } else {
        fit_rows - 1
    };
    for (i, s) in series.iter().enumerate().take(shown) {
        rows.push((Some(i), fit_text(&s.label, max_text)));
    }
    if shown < series.len() {
        rows.push((
            None,
            fit_text(&format!("+{} more", series.len() - shown), max_text),
        ));
    }
    let text_w = rows.iter().map(|(_, t)| text_width(t)).max().unwrap_or(0);
    let w = fixed_w + text_w;
    let h = 2 * LEGEND_PAD + rows.len() as u32 * LEGEND_ROW - 2; // the last row's gap, less the descent
    Some(Legend { w, h, rows })
}

// ---------------------------------------------------------------------------------------------
// Rasterizer

/// A clipping rectangle in continuous coordinates; it admits pixel columns
/// `floor(x0)..ceil(x1)` and rows `floor(y0)..ceil(y1)`.
struct ClipRect {
    x0: f64,
    y0: f64,
    x1: f64,
    y1: f64,
}

struct Canvas {
    w: u32,
    h: u32,
    px: Vec<u8>,
    /// Coverage (0..=255) of the shape being drawn; composited by `flush`.
    cov: Vec<u8>,
    touched: Vec<usize>,
}

impl Canvas {
    fn new(w: u32, h: u32) -> Canvas {
        let n = w as usize * h as usize;
        Canvas {
            w,
            h,
            px: vec![255; n * 3],
            cov: vec![0; n],
            touched: Vec::new(),
        }
    }

    /// Fills columns `x0..x1`, rows `y0..y1` (clipped to the image).
    fn fill(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: Rgb) {
        let x0 = x0.clamp(0, self.w as i64) as usize;
        let x1 = x1.clamp(0, self.w as i64) as usize;
        let y0 = y0.clamp(0, self.h as i64) as usize;
        let y1 = y1.clamp(0, self.h as i64) as usize;
        for y in y0..y1 {
            let row = y * self.w as usize;
            for x in x0..x1 {
                let i = (row + x) * 3;
                self.px[i..i + 3].copy_from_slice(&c);
            }
        }
    }

    /// Draws `s` with its top left corner at `(x, y)`, each font pixel a `TEXT_SCALE` square.
    fn text(&mut self, x: i64, y: i64, s: &str, c: Rgb) {
        let scale = TEXT_SCALE as i64;
        for (n, ch) in s.chars().enumerate() {
            let gx = x + n as i64 * ADVANCE as i64;
            if gx >= self.w as i64 {
                break;
            }
            let y = if descends(ch) {
                y + (DESCENT * TEXT_SCALE) as i64
            } else {
                y
            };
            for (r, bits) in glyph(ch).iter().enumerate() {
                for col in 0..GLYPH_W {
                    if bits & (1 << (GLYPH_W - 1 - col)) != 0 {
                        let px = gx + col as i64 * scale;
                        let py = y + r as i64 * scale;
                        self.fill(px, py, px + scale, py + scale, c);
                    }
                }
            }
        }
    }

    fn cover(&mut self, x: i64, y: i64, cov: f64) {
        if x < 0 || y < 0 || x >= self.w as i64 || y >= self.h as i64 {
            return;
        }
        let v = (cov.clamp(0.0, 1.0) * 255.0).round() as u8;
        if v == 0 {
            return;
        }
        let i = y as usize * self.w as usize + x as usize;
        if self.cov[i] == 0 {
            self.touched.push(i);
        }
        self.cov[i] = self.cov[i].max(v);
    }

    /// Composites the covered pixels in colour `c` and clears the coverage.
    fn flush(&mut self, c: Rgb) {
        for &i in &self.touched {
            let a = self.cov[i] as u32;
            self.cov[i] = 0;
            for (dst, &src) in self.px[i * 3..i * 3 + 3].iter_mut().zip(&c) {
                *dst = ((src as u32 * a + *dst as u32 * (255 - a) + 127) / 255) as u8;
            }
        }
        self.touched.clear();
    }

    /// A filled disc of radius `r` around `p` (coverage only), clipped.
    fn dot(&mut self, p: (f64, f64), r: f64, clip: &ClipRect) {
        if !(p.0 >= clip.x0 - r && p.0 <= clip.x1 + r && p.1 >= clip.y0 - r && p.1 <= clip.y1 + r) {
            return;
        }
        self.segment(p, p, r, clip, None);
    }

    /// A polyline `half_w` either side of the points (coverage only), clipped, maybe dashed.
    fn polyline(&mut self, pts: &[(f64, f64)], half_w: f64, clip: &ClipRect, dashed: bool) {
        let mut s = 0.0;
        for seg in pts.windows(2) {
            let (a, b) = (seg[0], seg[1]);
            let len = ((b.0 - a.0).powi(2) + (b.1 - a.1).powi(2)).sqrt();
            let r = half_w + 1.0;
            let grown = ClipRect {
                x0: clip.x0 - r,
                y0: clip.y0 - r,
                x1: clip.x1 + r,
                y1: clip.y1 + r,
            };
            if let Some((t0, t1)) = clip_segment(a, b, &grown) {
                let p = (a.0 + t0 * (b.0 - a.0), a.1 + t0 * (b.1 - a.1));
                let q = (a.0 + t1 * (b.0 - a.0), a.1 + t1 * (b.1 - a.1));
                let dash = dashed.then_some(s + t0 * len);
                self.segment(p, q, half_w, clip, dash);
            }
            if len.is_finite() {
                s += len;
            }
        }
    }

    /// One segment's coverage: pixels whose centre lies within `half_w` (+0.5 of smoothing) of
    /// the segment; only the pixels near the segment are visited. `dash` is the distance along
    /// the line at `a`, for dashing.
    fn segment(
        &mut self,
        a: (f64, f64),
        b: (f64, f64),
        half_w: f64,
        clip: &ClipRect,
        dash: Option<f64>,
    ) {
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let len2 = dx * dx + dy * dy;
        let len = len2.sqrt();
        let r = half_w + 1.0;
        let reach2 = (half_w + 0.5) * (half_w + 0.5);
        // Iterate along the major axis, and across it only near the line.
        let steep = dy.abs() > dx.abs();
        let (ma, mi_a, dmaj, dmin) = if steep {
            (a.1, a.0, dy, dx)
        } else {
            (a.0, a.1, dx, dy)
        };
        let (maj_lo, maj_hi, min_lo, min_hi) = if steep {
            (
                clip.y0.floor(),
                clip.y1.ceil(),
                clip.x0.floor(),
                clip.x1.ceil(),
            )
        } else {
            (
                clip.x0.floor(),
                clip.x1.ceil(),
                clip.y0.floor(),
                clip.y1.ceil(),
            )
        };
        let across = if dmaj.abs() > 0.0 {
            (r * len / dmaj.abs()).min(r * 1.5)
        } else {
            r
        };
        let m0 = (ma.min(ma + dmaj) - r).floor().max(maj_lo);
        let m1 = (ma.max(ma + dmaj) + r).floor().min(maj_hi - 1.0);
        if !(m0.is_finite() && m1.is_finite()) {
            return;
        }
        let mut m = m0;
        while m <= m1 {
            let mc = m + 0.5;
            let t = if dmaj != 0.0 {
                ((mc - ma) / dmaj).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let c = mi_a + t * dmin;
            let n0 = (c - across).floor().max(min_lo);
            let n1 = (c + across).floor().min(min_hi - 1.0);
            let mut n = n0;
            while n <= n1 {
                let (x, y) = if steep { (n, m) } else { (m, n) };
                n += 1.0;
                // (x, y) lies inside the image here: the clip rectangle is within it.
                let idx = y as usize * self.w as usize + x as usize;
                if self.cov.get(idx) == Some(&255) {
                    continue; // already fully covered by this shape
                }
                let (cx, cy) = (x + 0.5, y + 0.5);
                let u = if len2 > 0.0 {
                    (((cx - a.0) * dx + (cy - a.1) * dy) / len2).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                let (qx, qy) = (a.0 + u * dx, a.1 + u * dy);
                let d2 = (cx - qx).powi(2) + (cy - qy).powi(2);
                if d2 >= reach2 {
                    continue;
                }
                if let Some(s0) = dash {
                    if (s0 + u * len).rem_euclid(DASH_PERIOD) >= DASH_ON {
                        continue;
                    }
                }
                self.cover(x as i64, y as i64, half_w + 0.5 - d2.sqrt());
            }
            m += 1.0;
        }
    }
}

/// Liang-Barsky: the parameter range of `a + t (b - a)`, `t` in 0..=1, inside `r`.
fn clip_segment(a: (f64, f64), b: (f64, f64), r: &ClipRect) -> Option<(f64, f64)> {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let mut t0 = 0.0f64;
    let mut t1 = 1.0f64;
    for (p, q) in [
        (-dx, a.0 - r.x0),
        (dx, r.x1 - a.0),
        (-dy, a.1 - r.y0),
        (dy, r.y1 - a.1),
    ] {
        if p == 0.0 {
            if q < 0.0 {
                return None;
            }
        } else {
            let t = q / p;
            if p < 0.0 {
                t0 = t0.max(t);
            } else {
                t1 = t1.min(t);
            }
        }
    }
    if t0 <= t1 && t0.is_finite() && t1.is_finite() {
        Some((t0, t1))
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Font: 5 x 7 glyphs for ASCII 32..=126, one byte a row, top row first, bit 4 = leftmost column.
// Text is TEXT_H pixels high above its baseline; g, p, q and y reach DESCENT font rows below.

const GLYPH_W: u32 = 5;
const TEXT_SCALE: u32 = 2;
const TEXT_H: u32 = 7 * TEXT_SCALE;
/// Horizontal distance between two characters' left edges.
const ADVANCE: u32 = (GLYPH_W + 1) * TEXT_SCALE;

/// The width in pixels of `s` as the chart writes it (every character, even one drawn as `?`,
/// takes the same room).
pub fn text_width(s: &str) -> u32 {
    let n = s.chars().count() as u32;
    if n == 0 {
        0
    } else {
        n.saturating_mul(ADVANCE) - TEXT_SCALE
    }
}

/// `s`, cut short with "..." if it is wider than `max_px`.
fn fit_text(s: &str, max_px: u32) -> String {
    if text_width(s) <= max_px {
        return s.to_string();
    }
    let room = (max_px / ADVANCE) as usize;
    if room <= 3 {
        return ".".repeat(room);
    }
    let mut t: String = s.chars().take(room - 3).collect();
    t.push_str("...");
    t
}

/// Font rows that the lower case letters with a tail (g, p, q, y) are drawn below the others:
/// their glyphs hold the body in rows 0..5 and the tail in rows 5..7.
const DESCENT: u32 = 2;

fn descends(c: char) -> bool {
    matches!(c, 'g' | 'p' | 'q' | 'y')
}

fn glyph(c: char) -> &'static [u8; 7] {
    let code = c as u32;
    if (32..=126).contains(&code) {
        &FONT[(code - 32) as usize]
    } else {
        &FONT[('?' as u32 - 32) as usize]
    }
}

#[rustfmt::skip]
const FONT: [[u8; 7]; 95] = [
    [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // ' '
    [0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04], // !
    [0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00], // "
    [0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A], // #
    [0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04], // $
    [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03], // %
    [0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D], // &
    [0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00], // '
    [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02], // (
    [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08], // )
    [0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00], // *
    [0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00], // +
    [0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08], // ,
    [0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00], // -
    [0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C], // .
    [0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10], // /
    [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E], // 0
    [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E], // 1
    [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F], // 2
    [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E], // 3
    [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02], // 4
    [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E], // 5
    [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E], // 6
    [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08], // 7
    [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E], // 8
    [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C], // 9
    [0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00], // :
    [0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08], // ;
    [0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02], // <
    [0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00], // =
    [0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08], // >
    [0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04], // ?
    [0x0E, 0x11, 0x01, 0x0D, 0x15, 0x15, 0x0E], // @
    [0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11], // A
    [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E], // B
    [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E], // C
    [0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C], // D
    [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F], // E
    [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10], // F
    [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F], // G
    [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11], // H
    [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E], // I
    [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C], // J
    [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11], // K
    [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F], // L
    [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11], // M
    [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11], // N
    [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E], // O
    [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10], // P
    [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D], // Q
    [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11], // R
    [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E], // S
    [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04], // T
    [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E], // U
    [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04], // V
    [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A], // W
    [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11], // X
    [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04], // Y
    [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F], // Z
    [0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E], // [
    [0x10, 0x10, 0x08, 0x04, 0x02, 0x01, 0x01], // backslash
    [0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E], // ]
    [0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00], // ^
    [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F], // _
    [0x08, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00], // `
    [0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F], // a
    [0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E], // b
    [0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E], // c
    [0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F], // d
    [0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E], // e
    [0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08], // f
    [0x0F, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E], // g (descends)
    [0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11], // h
    [0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E], // i
    [0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C], // j
    [0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12], // k
    [0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E], // l
    [0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11], // m
    [0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11], // n
    [0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E], // o
    [0x1E, 0x11, 0x11, 0x11, 0x1E, 0x10, 0x10], // p (descends)
    [0x0F, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x01], // q (descends)
    [0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10], // r
    [0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E], // s
    [0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06], // t
    [0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D], // u
    [0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04], // v
    [0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A], // w
    [0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11], // x
    [0x11, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E], // y (descends)
    [0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F], // z
    [0x02, 0x04, 0x04, 0x08, 0x04, 0x04, 0x02], // {
    [0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04], // |
    [0x08, 0x04, 0x04, 0x02, 0x04, 0x04, 0x08], // }
    [0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00], // ~
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glyphs_are_distinct_and_fit_five_columns() {
        for (i, g) in FONT.iter().enumerate() {
            assert!(
                g.iter().all(|row| row & !0x1F == 0),
                "glyph {i} wider than 5"
            );
            if i > 0 {
                assert!(g.iter().any(|&row| row != 0), "glyph {} is blank", i + 32);
            }
            for (j, h) in FONT.iter().enumerate().skip(i + 1) {
                assert_ne!(g, h, "glyphs {} and {} are the same", i + 32, j + 32);
            }
        }
    }

    #[test]
    fn tick_numbers() {
        assert_eq!(tick_labels(&[0.0, 0.5, 1.0], 0.5), ["0", "0.5", "1.0"]);
        assert_eq!(tick_labels(&[-20.0, 0.0, 20.0], 20.0), ["-20", "0", "20"]);
        assert_eq!(
            tick_labels(&[0.0, 2.5e5, 5e5], 2.5e5),
            ["0", "250k", "500k"]
        );
        assert_eq!(tick_labels(&[1e9, 1.2e9], 2e8), ["1.0G", "1.2G"]);
        assert_eq!(tick_labels(&[-0.0], 1.0), ["0"]);
        assert_eq!(tick_labels(&[1e-6, 2e-6], 1e-6), ["1.0e-6", "2.0e-6"]);
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(130.0), 200.0);
        assert!((nice_step(0.003) - 0.005).abs() < 1e-15);
    }

    #[test]
    fn fit_text_cuts_with_dots() {
        assert_eq!(fit_text("abc", 1000), "abc");
        let t = fit_text("abcdefghijkl", ADVANCE * 6);
        assert_eq!(t, "abc...");
        assert!(text_width(&t) <= ADVANCE * 6);
    }
}
