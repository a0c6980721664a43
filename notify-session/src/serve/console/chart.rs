//! The overview's chart: appends and acknowledgements per second over the samples
//! kept (`observed.rs`), as inline SVG (no script, no image request). Only numbers
//! this module computes go into the markup.

use std::fmt::Write as _;

use super::html::Html;
use super::observed::{SAMPLES_KEPT, Sample};

const WIDTH: usize = 1200;
const HEIGHT: usize = 200;
const PAD: usize = 24;

/// The chart of `samples` (oldest first), the newest at the right edge.
pub(crate) fn rates(samples: &[Sample]) -> Html {
    let top = samples
        .iter()
        .map(|s| s.appends.max(s.acks))
        .max()
        .unwrap_or(0)
        .max(1);
    let plot_w = WIDTH - 2 * PAD;
    let plot_h = HEIGHT - 2 * PAD;
    let x_of = |i: usize| {
        // The newest sample at the right: position by age.
        let age = samples.len() - 1 - i;
        PAD + plot_w - age.min(SAMPLES_KEPT - 1) * plot_w / (SAMPLES_KEPT - 1)
    };
    let y_of = |v: u64| {
        let v = usize::try_from(v.min(top)).unwrap_or(0);
        let top = usize::try_from(top).unwrap_or(1);
        PAD + plot_h - v * plot_h / top
    };
    let line = |pick: fn(&Sample) -> u64| {
        let mut points = String::new();
        for (i, s) in samples.iter().enumerate() {
            let _ = write!(points, "{},{} ", x_of(i), y_of(pick(s)));
        }
        points
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"appends and acknowledgements per second, last five minutes\">"
    );
    let _ = write!(
        svg,
        "<line x1=\"{PAD}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#d8dde3\"/>",
        b = PAD + plot_h,
        r = PAD + plot_w
    );
    let _ = write!(
        svg,
        "<text x=\"{PAD}\" y=\"{y}\">{top}/s</text><text x=\"{PAD}\" y=\"{b}\">5 min ago</text><text x=\"{r}\" y=\"{b}\" text-anchor=\"end\">now</text>",
        y = PAD - 6,
        b = HEIGHT - 6,
        r = PAD + plot_w
    );
    if !samples.is_empty() {
        let _ = write!(
            svg,
            "<polyline class=\"appends\" points=\"{}\"/><polyline class=\"acks\" points=\"{}\"/>",
            line(|s| s.appends),
            line(|s| s.acks)
        );
    }
    svg.push_str("</svg>");
    Html::trusted(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_plots_every_sample_inside_its_box() {
        let samples: Vec<Sample> = (0..10)
            .map(|i: u64| Sample {
                appends: i * 3,
                acks: 1,
            })
            .collect();
        let svg = format!("{:?}", rates(&samples));
        assert!(svg.contains("27/s"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2);
        // The newest sample sits at the right edge, the largest at the top.
        assert!(svg.contains(&format!("{},{}", WIDTH - PAD, PAD)), "{svg}");
    }
}
