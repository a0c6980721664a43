//! The overview's chart: appends and acknowledgements per second over the samples
//! kept (`observed.rs`), as inline SVG (no script, no image request), built with
//! [`Html`] like every page: markup written here, numbers through [`Html::num`].

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
    let mut svg = Html::default();
    svg.raw("<svg class=\"chart\" viewBox=\"0 0 ")
        .num(WIDTH)
        .raw(" ")
        .num(HEIGHT)
        .raw("\" role=\"img\" aria-label=\"appends and acknowledgements per second, last five minutes\">");
    svg.raw("<line x1=\"")
        .num(PAD)
        .raw("\" y1=\"")
        .num(PAD + plot_h)
        .raw("\" x2=\"")
        .num(PAD + plot_w)
        .raw("\" y2=\"")
        .num(PAD + plot_h)
        .raw("\" stroke=\"#d8dde3\"/>");
    svg.raw("<text x=\"")
        .num(PAD)
        .raw("\" y=\"")
        .num(PAD - 6)
        .raw("\">")
        .text(top)
        .raw("/s</text><text x=\"")
        .num(PAD)
        .raw("\" y=\"")
        .num(HEIGHT - 6)
        .raw("\">5 min ago</text><text x=\"")
        .num(PAD + plot_w)
        .raw("\" y=\"")
        .num(HEIGHT - 6)
        .raw("\" text-anchor=\"end\">now</text>");
    if !samples.is_empty() {
        for (class, pick) in [
            (
                "<polyline class=\"appends\" points=\"",
                (|s: &Sample| s.appends) as fn(&Sample) -> u64,
            ),
            ("<polyline class=\"acks\" points=\"", |s: &Sample| s.acks),
        ] {
            svg.raw(class);
            for (i, s) in samples.iter().enumerate() {
                svg.num(x_of(i)).raw(",").num(y_of(pick(s))).raw(" ");
            }
            svg.raw("\"/>");
        }
    }
    svg.raw("</svg>");
    svg
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
