//! The run as pictures: SVG charts of the figures the tables hold, drawn with plotters'
//! SVG backend (its labels are SVG text the viewer lays out: no font files are read).
//! Each chart is a list of series, each series a list of points read through the same
//! sources as the tables ([`Src`]); a series the run did not measure is left out, and a
//! chart with no series at all is not drawn.

use plotters::prelude::*;

use super::human::figure;
use super::results::{Results, Src};

/// One line (or set of bars): its legend and its points, `(x, where y comes from)`.
pub(super) struct Series {
    pub(super) label: &'static str,
    pub(super) points: &'static [(f64, Src)],
}

/// How a chart draws its series.
#[derive(Clone, Copy)]
pub(super) enum Shape {
    /// Lines over logarithmic x and y: rates against a count.
    LogLines,
    /// Bars side by side in groups, one group per x (an index into the categories).
    Bars(&'static [&'static str]),
}

/// One chart: its file under `docs/benchmarks/`, its title, axes and series.
pub(super) struct Chart {
    pub(super) file: &'static str,
    pub(super) title: &'static str,
    pub(super) x_desc: &'static str,
    pub(super) y_desc: &'static str,
    pub(super) shape: Shape,
    pub(super) series: &'static [Series],
}

/// A series' points that the run measured.
fn points(results: &Results, series: &Series) -> Vec<(f64, f64)> {
    series
        .points
        .iter()
        .filter_map(|&(x, src)| figure(results, src).map(|(_, y)| (x, y)))
        .filter(|&(_, y)| y.is_finite() && y > 0.0)
        .collect()
}

/// A value as an axis label: 1.5k, 20k, 1.2M.
fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    if v >= 10.0 || (v - v.round()).abs() < 0.05 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

type Drawn = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Draws `chart` as SVG, or `None` when the run measured none of its series.
pub(super) fn draw(chart: &Chart, results: &Results) -> anyhow::Result<Option<String>> {
    let series: Vec<(&'static str, Vec<(f64, f64)>)> = chart
        .series
        .iter()
        .map(|s| (s.label, points(results, s)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    if series.is_empty() {
        return Ok(None);
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 440)).into_drawing_area();
        let drawn = match chart.shape {
            Shape::LogLines => log_lines(&root, chart, &series),
            Shape::Bars(categories) => bars(&root, chart, categories, &series),
        };
        drawn.map_err(|e| anyhow::anyhow!("drawing {}: {e}", chart.file))?;
        root.present()
            .map_err(|e| anyhow::anyhow!("drawing {}: {e}", chart.file))?;
    }
    Ok(Some(svg))
}

/// The smallest and largest of the series' values along one axis.
fn span(series: &[(&str, Vec<(f64, f64)>)], pick: fn(&(f64, f64)) -> f64) -> (f64, f64) {
    series
        .iter()
        .flat_map(|(_, p)| p.iter().map(pick))
        .fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// The white page, the title and the room for the axes' labels, every chart alike.
fn frame<'a, 'b>(
    root: &'a Area<'b>,
    chart: &Chart,
) -> Result<ChartBuilder<'a, 'b, SVGBackend<'b>>, Box<dyn std::error::Error + Send + Sync>> {
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(chart.title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64);
    Ok(builder)
}

/// The legend, top left, every chart alike.
fn legend<'a, CT: CoordTranslate>(ctx: &mut ChartContext<'a, SVGBackend<'a>, CT>) -> Drawn {
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn log_lines(root: &Area<'_>, chart: &Chart, series: &[(&'static str, Vec<(f64, f64)>)]) -> Drawn {
    let (x_lo, x_hi) = span(series, |p| p.0);
    let (y_lo, y_hi) = span(series, |p| p.1);
    let mut ctx = frame(root, chart)?.build_cartesian_2d(
        (x_lo / 1.5..x_hi * 1.5).log_scale(),
        (y_lo / 2.0..y_hi * 2.0).log_scale(),
    )?;
    ctx.configure_mesh()
        .x_desc(chart.x_desc)
        .y_desc(chart.y_desc)
        .x_label_formatter(&|v| short(*v))
        .y_label_formatter(&|v| short(*v))
        .draw()?;
    for (i, (label, points)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        ctx.draw_series(
            LineSeries::new(points.iter().copied(), colour.stroke_width(2)).point_size(4),
        )?
        .label(*label)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    legend(&mut ctx)
}

fn bars(
    root: &Area<'_>,
    chart: &Chart,
    categories: &'static [&'static str],
    series: &[(&'static str, Vec<(f64, f64)>)],
) -> Drawn {
    let (_, y_hi) = span(series, |p| p.1);
    let groups = categories.len() as f64;
    let mut ctx = frame(root, chart)?.build_cartesian_2d(-0.5..groups - 0.5, 0.0..y_hi * 1.4)?;
    ctx.configure_mesh()
        .disable_x_mesh()
        .x_labels(categories.len())
        .x_desc(chart.x_desc)
        .y_desc(chart.y_desc)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 0.01 && i >= 0.0 {
                categories
                    .get(i as usize)
                    .map_or_else(String::new, |c| (*c).to_owned())
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| short(*v))
        .draw()?;
    let width = 0.8 / series.len() as f64;
    for (i, (label, points)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let left = -0.4 + width * i as f64;
        ctx.draw_series(points.iter().map(|&(x, y)| {
            Rectangle::new(
                [(x + left, 0.0), (x + left + width * 0.9, y)],
                colour.filled(),
            )
        }))?
        .label(*label)
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
    }
    legend(&mut ctx)
}
