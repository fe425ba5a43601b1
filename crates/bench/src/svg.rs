//! Hand-written SVG charts for the Markdown report: a line chart of latency against users (or
//! arrival rate) with one series per target and the knee marked, and a bar chart of average and
//! P90 latency per target. Plain strings, no dependencies, deterministic output.

use std::fmt::Write as _;

/// One line of a line chart.
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (x, y) points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Index of the point to mark as the knee.
    pub knee: Option<usize>,
}

/// One group of a bar chart.
pub struct Bar {
    /// Target label.
    pub label: String,
    /// Average.
    pub avg: f64,
    /// 90th percentile.
    pub p90: f64,
}

const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" upper bound and tick step for values up to `max`.
fn nice_scale(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.25);
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 || (v.fract() == 0.0 && v.abs() < 1e15) {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Starts a chart: the `<svg>` element of size `(w, h)`, a white background, the title centred
/// over the plot (which starts at `left` and is `plot_w` wide), and a horizontal grid line with
/// its label at every `y_step` up to `y_top`, `sy` mapping a value to its y coordinate.
fn open_chart(
    title: &str,
    (w, h): (f64, f64),
    left: f64,
    plot_w: f64,
    (y_top, y_step): (f64, f64),
    sy: impl Fn(f64) -> f64,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        left + plot_w / 2.0,
        escape(title)
    );
    let mut y = 0.0;
    while y <= y_top + 1e-9 {
        let py = sy(y);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + plot_w,
            left - 6.0,
            py + 4.0,
            fmt_num(y)
        );
        y += y_step;
    }
    s
}

/// A line chart; the knee of each series is circled and labelled.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    // The legend column is as wide as the longest label needs (up to 8 px a character at 12 px).
    let longest = series
        .iter()
        .map(|s| s.label.chars().count())
        .max()
        .unwrap_or(0);
    let right = (60.0 + 8.0 * longest as f64).max(190.0);
    let (w, h) = (570.0 + right, 420.0);
    let (left, top, bottom) = (70.0, 40.0, 50.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let all = series.iter().flat_map(|s| s.points.iter());
    let x_max = all.clone().map(|p| p.0).fold(0.0, f64::max);
    let y_max = all.map(|p| p.1).fold(0.0, f64::max);
    let (x_top, x_step) = nice_scale(x_max);
    let (y_top, y_step) = nice_scale(y_max);
    let sx = |x: f64| left + x / x_top * plot_w;
    let sy = |y: f64| top + plot_h - y / y_top * plot_h;
    // Grid and ticks.
    let mut s = open_chart(title, (w, h), left, plot_w, (y_top, y_step), sy);
    let mut x = 0.0;
    while x <= x_top + 1e-9 {
        let px = sx(x);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#f0f0f0"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top + plot_h,
            top + plot_h + 16.0,
            fmt_num(x)
        );
        x += x_step;
    }
    let _ = writeln!(
        s,
        r#"<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        left + plot_w / 2.0,
        h - 12.0,
        escape(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        escape(y_label)
    );
    for (i, series) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = series
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for &(x, y) in &series.points {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                sx(x),
                sy(y)
            );
        }
        if let Some(&(kx, ky)) = series.knee.and_then(|k| series.points.get(k)) {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="8" fill="none" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}" fill="{color}">knee</text>"#,
                sx(kx),
                sy(ky),
                sx(kx) + 10.0,
                sy(ky) - 10.0
            );
        }
        let ly = top + 14.0 + i as f64 * 18.0;
        let lx = left + plot_w + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            ly - 4.0,
            lx + 18.0,
            ly - 4.0,
            lx + 24.0,
            ly,
            escape(&series.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Grouped bars: for each target a solid bar (average) and a lighter bar (P90), values printed.
pub fn bar_chart(title: &str, y_label: &str, bars: &[Bar]) -> String {
    let group_w = 70.0;
    let (left, right, top, bottom) = (70.0, 30.0, 40.0, 90.0);
    let plot_w = (bars.len().max(1) as f64) * group_w;
    let (w, h) = (left + plot_w + right + 120.0, 380.0);
    let plot_h = h - top - bottom;
    let y_max = bars.iter().map(|b| b.p90.max(b.avg)).fold(0.0, f64::max);
    let (y_top, y_step) = nice_scale(y_max);
    let sy = |y: f64| top + plot_h - y / y_top * plot_h;
    let mut s = open_chart(title, (w, h), left, plot_w, (y_top, y_step), sy);
    let _ = writeln!(
        s,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        escape(y_label)
    );
    for (i, b) in bars.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let gx = left + i as f64 * group_w;
        for (j, (value, opacity)) in [(b.avg, 1.0), (b.p90, 0.45)].iter().enumerate() {
            let bx = gx + 10.0 + j as f64 * 25.0;
            let by = sy(*value);
            let _ = writeln!(
                s,
                r#"<rect x="{bx:.1}" y="{by:.1}" width="24" height="{:.1}" fill="{color}" fill-opacity="{opacity}"/><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="9">{}</text>"#,
                (top + plot_h - by).max(0.0),
                bx + 12.0,
                by - 3.0,
                fmt_num(*value)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" transform="rotate(-35 {:.1} {:.1})">{}</text>"#,
            gx + 35.0,
            top + plot_h + 14.0,
            gx + 35.0,
            top + plot_h + 14.0,
            escape(&b.label)
        );
    }
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/>"#,
        top + plot_h,
        left + plot_w,
        top + plot_h
    );
    let lx = left + plot_w + 16.0;
    let _ = writeln!(
        s,
        r#"<rect x="{lx}" y="{top}" width="14" height="14" fill="gray"/><text x="{:.1}" y="{:.1}">average</text><rect x="{lx}" y="{:.1}" width="14" height="14" fill="gray" fill-opacity="0.45"/><text x="{:.1}" y="{:.1}">P90</text>"#,
        lx + 20.0,
        top + 11.0,
        top + 20.0,
        lx + 20.0,
        top + 31.0
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_short() {
        assert_eq!(fmt_num(20.0), "20");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(0.125), "0.125");
        assert_eq!(fmt_num(1234.4), "1234");
    }

    #[test]
    fn nice_scales_cover_the_maximum() {
        for max in [0.3, 1.0, 7.0, 13.0, 99.0, 1234.0] {
            let (top, step) = nice_scale(max);
            assert!(top >= max && step > 0.0 && top / step <= 10.0, "{max}");
        }
    }

    #[test]
    fn charts_are_wellformed_and_mark_the_knee() {
        let svg = line_chart(
            "t",
            "users",
            "ms",
            &[Series {
                label: "a<b".into(),
                points: vec![(1.0, 1.0), (10.0, 2.0), (30.0, 9.0)],
                knee: Some(1),
            }],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("knee") && svg.contains("a&lt;b"));
        let bars = bar_chart(
            "t",
            "ms",
            &[Bar {
                label: "redis".into(),
                avg: 1.0,
                p90: 2.0,
            }],
        );
        assert_eq!(bars.matches("<rect").count(), 5);
    }
}
