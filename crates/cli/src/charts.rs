//! SVG charts for the HTML report, drawn with plotters' SVG backend: grouped
//! bars, stacked bars and lines, each with its legend beside the plot (never
//! over the data) and its values written on the bars when there are few.
//!
//! Text is left to the browser's sans-serif font (plotters writes `<text>`
//! elements; no font file is read or embedded).

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Width and height of a chart in px.
pub const SIZE: (u32, u32) = (600, 340);
/// Width of the legend column.
const LEGEND_W: u32 = 180;

/// A colour-blind-safe palette (Okabe and Ito, 2008), then darker and
/// lighter hues so that up to 16 series stay apart.
const PALETTE: [RGBColor; 16] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(86, 180, 233),
    RGBColor(204, 121, 167),
    RGBColor(240, 228, 66),
    RGBColor(0, 0, 0),
    RGBColor(120, 120, 120),
    RGBColor(136, 34, 85),
    RGBColor(17, 119, 51),
    RGBColor(51, 34, 136),
    RGBColor(153, 153, 51),
    RGBColor(68, 170, 153),
    RGBColor(170, 68, 153),
    RGBColor(190, 190, 190),
];

/// The colour of series `i`.
pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Res = Result<(), String>;

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("{e:?}")
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Writes `names` centred under slots 0, 1, .. of the x axis (at `y`), cut
/// to `fit` characters with an ellipsis when given.
fn x_labels(
    plot: &Area,
    chart: &Chart,
    names: &[String],
    y: f64,
    size: u32,
    fit: Option<usize>,
) -> Res {
    for (i, name) in names.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, y));
        let label: String = match fit {
            Some(max) if name.chars().count() > max => name
                .chars()
                .take(max - 1)
                .chain(std::iter::once('…'))
                .collect(),
            _ => name.clone(),
        };
        plot.draw(&Text::new(
            label,
            (px, py + 8),
            ("sans-serif", size)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// A short form of a number for a bar's label.
fn short(v: f64) -> String {
    let a = v.abs();
    let scaled = |div: f64, suffix: &str| {
        let x = v / div;
        if x.abs() >= 100.0 || x.fract() == 0.0 {
            format!("{x:.0}{suffix}")
        } else {
            format!("{x:.1}{suffix}")
        }
    };
    if a >= 1e9 {
        scaled(1e9, "G")
    } else if a >= 1e6 {
        scaled(1e6, "M")
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Draws the legend: one coloured square (or line) and name per series.
fn legend(area: &Area, names: &[String], line: bool) -> Res {
    let font = ("sans-serif", 14).into_font();
    for (i, n) in names.iter().enumerate() {
        let y = 40 + 20 * i as i32;
        if y > SIZE.1 as i32 - 10 {
            area.draw(&Text::new(
                format!("… {} more", names.len() - i),
                (6, y),
                font.clone(),
            ))
            .map_err(err)?;
            break;
        }
        let c = color(i);
        if line {
            area.draw(&PathElement::new(
                vec![(4, y + 7), (22, y + 7)],
                c.stroke_width(3),
            ))
            .map_err(err)?;
        } else {
            area.draw(&Rectangle::new([(6, y + 1), (18, y + 13)], c.filled()))
                .map_err(err)?;
        }
        let label: String = if n.chars().count() > 24 {
            n.chars().take(23).chain(std::iter::once('…')).collect()
        } else {
            n.clone()
        };
        area.draw(&Text::new(label, (26, y), font.clone()))
            .map_err(err)?;
    }
    Ok(())
}

/// The y range of `values` with zero included and some headroom.
fn y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi == lo {
        hi = lo + 1.0;
    }
    let pad = (hi - lo) * 0.12;
    (
        if lo < 0.0 { lo - pad } else { lo },
        if hi > 0.0 { hi + pad } else { hi },
    )
}

/// A grouped bar chart: one group per entry of `groups` (on the x axis),
/// one bar per series in each group (the legend names the series).
pub fn grouped_bars(
    title: &str,
    y_desc: &str,
    groups: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot, side) = root.split_horizontally(SIZE.0 - LEGEND_W);
        let (lo, hi) = y_range(series.iter().flat_map(|(_, v)| v.iter().flatten().copied()));
        let ng = groups.len().max(1);
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, ("sans-serif", 18).into_font())
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..ng as f64, lo..hi)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(y_desc)
            .y_label_formatter(&|v| short(*v))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()
            .map_err(err)?;
        let ns = series.len().max(1);
        let width = 0.8 / ns as f64;
        let few = ng * ns <= 24;
        for (si, (_, vals)) in series.iter().enumerate() {
            let c = color(si);
            for (g, v) in vals.iter().enumerate() {
                let Some(v) = v else { continue };
                let x0 = g as f64 + 0.1 + si as f64 * width;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x0, 0.0), (x0 + width * 0.92, *v)],
                        c.filled(),
                    )))
                    .map_err(err)?;
                if few {
                    let (px, py) = chart.backend_coord(&(x0 + width * 0.46, *v));
                    let pos = if *v >= 0.0 {
                        Pos::new(HPos::Center, VPos::Bottom)
                    } else {
                        Pos::new(HPos::Center, VPos::Top)
                    };
                    plot.draw(&Text::new(
                        short(*v),
                        (px, if *v >= 0.0 { py - 2 } else { py + 2 }),
                        ("sans-serif", 12).into_font().color(&BLACK).pos(pos),
                    ))
                    .map_err(err)?;
                }
            }
        }
        if lo < 0.0 {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(0.0, 0.0), (ng as f64, 0.0)],
                    BLACK.stroke_width(1),
                )))
                .map_err(err)?;
        }
        x_labels(&plot, &chart, groups, lo, 13, None)?;
        let names: Vec<String> = series.iter().map(|(n, _)| n.clone()).collect();
        legend(&side, &names, false)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Stacked bars: one bar per category, each split into `parts` (in %).
pub fn stacked_bars(
    title: &str,
    y_desc: &str,
    categories: &[String],
    parts: &[(String, Vec<f64>)],
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot, side) = root.split_horizontally(SIZE.0 - LEGEND_W);
        let n = categories.len().max(1);
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, ("sans-serif", 18).into_font())
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..n as f64, 0f64..100.0)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(y_desc)
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()
            .map_err(err)?;
        for c in 0..categories.len() {
            let mut base = 0.0;
            for (pi, (_, v)) in parts.iter().enumerate() {
                let h = v.get(c).copied().unwrap_or(0.0);
                if h <= 0.0 {
                    continue;
                }
                let x0 = c as f64 + 0.15;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x0, base), (x0 + 0.7, base + h)],
                        color(pi).filled(),
                    )))
                    .map_err(err)?;
                if h >= 6.0 {
                    let (px, py) = chart.backend_coord(&(x0 + 0.35, base + h / 2.0));
                    plot.draw(&Text::new(
                        format!("{h:.0}%"),
                        (px, py),
                        ("sans-serif", 11)
                            .into_font()
                            .color(&WHITE)
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    ))
                    .map_err(err)?;
                }
                base += h;
            }
        }
        let fit = (categories.len() > 3).then_some(if categories.len() > 6 { 8 } else { 14 });
        x_labels(&plot, &chart, categories, 0.0, 12, fit)?;
        let names: Vec<String> = parts.iter().map(|(n, _)| n.clone()).collect();
        legend(&side, &names, false)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Lines: one per series, points `(x, y)`; `log_x` spaces x as powers of two
/// are spaced (thread counts).
pub fn lines(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot, side) = root.split_horizontally(SIZE.0 - LEGEND_W);
        let xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
        let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        let (x0, x1) = if x0.is_finite() && x1 > x0 {
            (x0, x1)
        } else {
            (0.0, 1.0)
        };
        let (_, hi) = y_range(series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)));
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, ("sans-serif", 18).into_font())
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, 0f64..hi)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&|v| short(*v))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()
            .map_err(err)?;
        for (i, (_, pts)) in series.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(err)?;
            if pts.len() <= 40 {
                chart
                    .draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))
                    .map_err(err)?;
            }
        }
        let names: Vec<String> = series.iter().map(|(n, _)| n.clone()).collect();
        legend(&side, &names, true)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_titles_and_legends() {
        let g = grouped_bars(
            "zone lock",
            "%",
            &["w1".into(), "w2".into()],
            &[
                ("base".into(), vec![Some(1.0), Some(-2.0)]),
                ("patch <7>".into(), vec![None, Some(3.0)]),
            ],
        )
        .expect("bars");
        assert!(g.starts_with("<svg"), "{}", &g[..40]);
        assert!(g.contains("zone lock") && g.contains("patch &lt;7&gt;"));
        let s = stacked_bars(
            "mix",
            "%",
            &["k".into()],
            &[("4K".into(), vec![40.0]), ("64K".into(), vec![60.0])],
        )
        .expect("stacked");
        assert!(s.contains("60%"));
        let l = lines(
            "gbps",
            "threads",
            "GB/s",
            &[("1x2M".into(), vec![(1.0, 2.0), (4.0, 6.0)])],
        )
        .expect("lines");
        assert!(l.contains("threads") && l.contains("1x2M"));
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short(25_845_560.0), "25.8M");
        assert_eq!(short(8.983), "8.98");
        assert_eq!(short(42.0), "42");
        assert_eq!(short(-12.5), "-12.5");
    }
}
