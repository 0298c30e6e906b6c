//! The benchmark as a PNG: for each world size a row of two panels,
//! latency per call against message size (log-log) and bus bandwidth
//! against size, one line per algorithm, ours against NCCL, CUDA-graph
//! replay numbers.
//!
//! Pure Rust end to end, because the GPU machines have no fontconfig or
//! freetype: plotters draws into an RGB buffer with the Go font embedded
//! in the binary (`fonts/`, BSD-style license beside it) through
//! `ab_glyph`, and `png` encodes the buffer.

use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::results::{BenchFile, Row, fmt_bytes};

/// The Go font (Bigelow & Holmes, see `fonts/LICENSE-Go-Regular.txt`).
static FONT_TTF: &[u8] = include_bytes!("../fonts/Go-Regular.ttf");
/// The family name every text style below asks for.
const FONT: &str = "sans-serif";

/// Size of one panel; a figure is two panels wide and one row per world
/// size tall. Chosen so the README shows it without scaling.
const PANEL_W_PX: u32 = 540;
const PANEL_H_PX: u32 = 340;

/// Font sizes in pixels: even, because plotters' `ab_glyph` path puts
/// each glyph at `size / 2 + top` truncated to an integer, which makes
/// letters of odd sizes jump a pixel up or down.
const CAPTION_PX: u32 = 18;
const TEXT_PX: u32 = 14;

#[derive(Clone, Copy, PartialEq)]
enum Marker {
    None,
    Circle,
    Square,
}

/// How each algorithm is drawn.
struct Look {
    algo: &'static str,
    label: &'static str,
    color: RGBColor,
    stroke_px: u32,
    dashed: bool,
    marker: Marker,
}

/// Drawing (and legend) order: our explicit algorithms, then any
/// algorithm not listed here (gray, dashed), then NCCL and its symmetric
/// kernels, then auto on top, where it hides the choice it follows.
const LOOKS: [Look; 10] = [
    Look {
        algo: "lamport",
        label: "Lamport one-shot",
        color: RGBColor(0xd6, 0x27, 0x28),
        stroke_px: 2,
        dashed: true,
        marker: Marker::None,
    },
    Look {
        algo: "lamport-two-shot",
        label: "Lamport two-shot",
        color: RGBColor(0x17, 0xa2, 0xb8),
        stroke_px: 2,
        dashed: true,
        marker: Marker::None,
    },
    Look {
        algo: "one-shot",
        label: "one-shot",
        color: RGBColor(0xe0, 0x7b, 0x10),
        stroke_px: 2,
        dashed: true,
        marker: Marker::None,
    },
    Look {
        algo: "two-shot",
        label: "two-shot",
        color: RGBColor(0x2c, 0x9a, 0x3c),
        stroke_px: 2,
        dashed: true,
        marker: Marker::None,
    },
    Look {
        algo: "hcm",
        label: "HCM",
        color: RGBColor(0x8e, 0x44, 0xad),
        stroke_px: 2,
        dashed: true,
        marker: Marker::None,
    },
    Look {
        algo: "push",
        label: "push",
        color: RGBColor(0x8c, 0x56, 0x4b),
        stroke_px: 2,
        dashed: true,
        marker: Marker::None,
    },
    Look {
        algo: "nccl",
        label: "NCCL",
        color: RGBColor(0x20, 0x20, 0x20),
        stroke_px: 2,
        dashed: false,
        marker: Marker::Square,
    },
    Look {
        algo: "nccl-sym",
        label: "NCCL symmetric",
        color: RGBColor(0x60, 0x60, 0x60),
        stroke_px: 2,
        dashed: true,
        marker: Marker::Square,
    },
    Look {
        algo: "nccl-sym-nomix",
        label: "NCCL symmetric, no graph mixing",
        color: RGBColor(0x9a, 0x9a, 0x9a),
        stroke_px: 2,
        dashed: true,
        marker: Marker::Square,
    },
    Look {
        algo: "auto",
        label: "intranode auto",
        color: RGBColor(0x1f, 0x5f, 0xbf),
        stroke_px: 3,
        dashed: false,
        marker: Marker::Circle,
    },
];

/// Where algorithms without a [`Look`] go in the drawing order: before
/// NCCL.
const OTHER_POSITION: usize = 6;

const OTHER: Look = Look {
    algo: "",
    label: "",
    color: RGBColor(0x80, 0x80, 0x80),
    stroke_px: 2,
    dashed: true,
    marker: Marker::None,
};

/// Registers the embedded font once per process; plotters' font table is
/// global.
fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FONT, FontStyle::Normal, FONT_TTF).is_ok());
    if ok {
        Ok(())
    } else {
        bail!("the embedded font could not be loaded")
    }
}

/// Renders one row of panels per results file (in the order given) and
/// returns the PNG file's bytes. `gpu` names the GPU in the titles of
/// files that do not record it.
pub fn render_png(files: &[BenchFile], gpu: Option<&str>) -> Result<Vec<u8>> {
    if files.is_empty() {
        bail!("no results to plot");
    }
    register_font()?;
    let (w, h) = (2 * PANEL_W_PX, PANEL_H_PX * files.len() as u32);
    let mut rgb = vec![255u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        root.fill(&WHITE)?;
        let areas = root.split_evenly((files.len(), 2));
        for (file, pair) in files.iter().zip(areas.chunks(2)) {
            let [lat, bw] = pair else {
                bail!("plotters split a row into {} panels", pair.len());
            };
            let title = title(file, gpu);
            draw_panel(lat, file, &title, Panel::Latency)?;
            draw_panel(bw, file, &title, Panel::BusBandwidth)?;
        }
        root.present()?;
    }
    encode_png(&rgb, w, h)
}

/// `2 x H200, bf16`.
fn title(file: &BenchFile, gpu: Option<&str>) -> String {
    let gpu = file.gpu_short().or(gpu).unwrap_or("GPU");
    format!("{} x {gpu}, {}", file.world, file.dtype)
}

#[derive(Clone, Copy, PartialEq)]
enum Panel {
    Latency,
    BusBandwidth,
}

impl Panel {
    fn value(self, row: &Row) -> f64 {
        match self {
            Panel::Latency => row.graph_us,
            Panel::BusBandwidth => row.busbw_gbps,
        }
    }
}

/// The algorithms of `rows` in drawing order, each with its look.
fn algos(rows: &[Row]) -> Vec<(String, &'static Look)> {
    let mut out: Vec<(usize, String, &'static Look)> = Vec::new();
    for r in rows {
        if out.iter().any(|(_, a, _)| *a == r.algo) {
            continue;
        }
        let (position, look) = match LOOKS.iter().position(|l| l.algo == r.algo) {
            Some(i) if i >= OTHER_POSITION => (i + 1, &LOOKS[i]),
            Some(i) => (i, &LOOKS[i]),
            None => (OTHER_POSITION, &OTHER),
        };
        out.push((position, r.algo.clone(), look));
    }
    // Stable: several unknown algorithms keep the order of the rows.
    out.sort_by_key(|a| a.0);
    out.into_iter().map(|(_, a, l)| (a, l)).collect()
}

/// Powers of 4 bytes within `[lo, hi]`: 1 KiB, 4 KiB, ... 256 MiB.
fn size_ticks(lo: f64, hi: f64) -> Vec<f64> {
    (0..64)
        .step_by(2)
        .map(|e| 2f64.powi(e))
        .filter(|&b| b >= lo && b <= hi)
        .collect()
}

/// 1, 2, 5, 10, 20, 50, ... within `[lo, hi]`.
fn decade_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powi(lo.log10().floor() as i32);
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let t = decade * m;
            if t >= lo && t <= hi {
                ticks.push(t);
            }
        }
        decade *= 10.0;
    }
    ticks
}

/// `1K`, `256M`: short size labels for the x axis.
fn size_label(bytes: f64) -> String {
    fmt_bytes(bytes.round() as usize)
        .replace(" KiB", "K")
        .replace(" MiB", "M")
        .replace(" GiB", "G")
        .replace(" B", "")
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    file: &BenchFile,
    title: &str,
    panel: Panel,
) -> Result<()> {
    if panel == Panel::BusBandwidth && file.world < 2 {
        // One rank moves nothing between GPUs: its bus bandwidth is 0 by
        // nccl-tests' convention, which has no place on a log axis.
        let note = format!("{title}: no bus bandwidth (one rank: nothing crosses a link)");
        area.draw(&Text::new(note, (16, 16), (FONT, TEXT_PX)))?;
        return Ok(());
    }
    let rows = &file.rows;
    let (mut x_lo, mut x_hi, mut y_lo, mut y_hi) = (f64::MAX, 0f64, f64::MAX, 0f64);
    for r in rows {
        let y = panel.value(r);
        if !(y.is_finite() && y > 0.0) {
            bail!(
                "{} {} at {} bytes: not a positive number ({y})",
                r.algo,
                if panel == Panel::Latency {
                    "latency"
                } else {
                    "bus bandwidth"
                },
                r.bytes
            );
        }
        x_lo = x_lo.min(r.bytes as f64);
        x_hi = x_hi.max(r.bytes as f64);
        y_lo = y_lo.min(y);
        y_hi = y_hi.max(y);
    }
    if x_lo <= 0.0 {
        bail!("a message of 0 bytes cannot go on a log axis");
    }
    // Margins of a few percent on the log axes keep the end points off
    // the frame.
    let x_range = (x_lo / 1.25)..(x_hi * 1.25);
    let x_ticks = size_ticks(x_range.start, x_range.end);
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(8)
        .margin_right(16)
        .x_label_area_size(40)
        .y_label_area_size(58);
    let caption = match panel {
        Panel::Latency => format!("{title}: latency per call (graph replay)"),
        Panel::BusBandwidth => format!("{title}: bus bandwidth (graph replay)"),
    };
    builder.caption(caption, (FONT, CAPTION_PX));
    let x_desc = format!("message size (bytes, {})", file.dtype);
    let grid = BLACK.mix(0.12);
    match panel {
        Panel::Latency => {
            let y_range = (y_lo / 1.3)..(y_hi * 1.3);
            let y_ticks = decade_ticks(y_range.start, y_range.end);
            let mut chart = builder.build_cartesian_2d(
                x_range.log_scale().with_key_points(x_ticks),
                y_range.clone().log_scale().with_key_points(y_ticks),
            )?;
            chart
                .configure_mesh()
                .bold_line_style(grid)
                .light_line_style(TRANSPARENT)
                .x_desc(x_desc)
                .y_desc("us per call")
                .x_label_formatter(&|b| size_label(*b))
                .y_label_formatter(&|us| format!("{us}"))
                .label_style((FONT, TEXT_PX))
                .axis_desc_style((FONT, TEXT_PX))
                .draw()?;
            draw_lines(&mut chart, rows, panel)?;
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK.mix(0.3))
                .label_font((FONT, TEXT_PX))
                .draw()?;
        }
        Panel::BusBandwidth => {
            let mut chart = builder.build_cartesian_2d(
                x_range.log_scale().with_key_points(x_ticks),
                0f64..(y_hi * 1.1),
            )?;
            chart
                .configure_mesh()
                .bold_line_style(grid)
                .light_line_style(TRANSPARENT)
                .x_desc(x_desc)
                .y_desc("bus bandwidth (GB/s)")
                .x_label_formatter(&|b| size_label(*b))
                .y_label_formatter(&|gbps| format!("{gbps:.0}"))
                .label_style((FONT, TEXT_PX))
                .axis_desc_style((FONT, TEXT_PX))
                .draw()?;
            draw_lines(&mut chart, rows, panel)?;
        }
    }
    Ok(())
}

fn draw_lines<'a, X, Y>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    rows: &[Row],
    panel: Panel,
) -> Result<()>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (algo, look) in algos(rows) {
        let mut points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.algo == algo)
            .map(|r| (r.bytes as f64, panel.value(r)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let style = look.color.stroke_width(look.stroke_px);
        let label = if look.label.is_empty() {
            algo.clone()
        } else {
            look.label.to_owned()
        };
        let series = if look.dashed {
            chart.draw_series(DashedLineSeries::new(points.iter().copied(), 6, 4, style))?
        } else {
            chart.draw_series(LineSeries::new(points.iter().copied(), style))?
        };
        series
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
        let fill = look.color.filled();
        match look.marker {
            Marker::None => {}
            Marker::Circle => {
                chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, fill)))?;
            }
            Marker::Square => {
                chart.draw_series(
                    points
                        .iter()
                        .map(|&p| EmptyElement::at(p) + Rectangle::new([(-3, -3), (3, 3)], fill)),
                )?;
            }
        }
    }
    Ok(())
}

/// RGB rows to a PNG file's bytes, compressed hard: the README's figure
/// is committed, so a smaller file is worth the encoding time.
fn encode_png(rgb: &[u8], w: u32, h: u32) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::High);
        let mut writer = encoder.write_header().context("png header")?;
        writer
            .write_image_data(rgb)
            .map_err(|e| anyhow!("png data: {e}"))?;
        writer.finish().context("png end")?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::row;

    fn synthetic(world: usize, with_hcm: bool) -> BenchFile {
        let mut rows = Vec::new();
        for e in (10..=28).step_by(2) {
            let bytes = 1usize << e;
            let t = 4.0 + bytes as f64 / 300e3;
            rows.push(row(world, bytes, "one-shot", t * 1.1));
            rows.push(row(world, bytes, "two-shot", t * 1.3));
            if with_hcm {
                rows.push(row(world, bytes, "hcm", t * 1.2));
            }
            rows.push(row(world, bytes, "nccl", t * 1.4));
            rows.push(row(world, bytes, "auto", t));
        }
        BenchFile::new(world, Some("NVIDIA H200".into()), "bf16", rows)
    }

    fn decode(png_bytes: &[u8]) -> (png::OutputInfo, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info, buf)
    }

    #[test]
    fn renders_a_png_with_a_row_per_world_size() {
        let png_bytes = render_png(&[synthetic(2, false), synthetic(4, true)], None).unwrap();
        assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n");
        let (info, rgb) = decode(&png_bytes);
        assert_eq!((info.width, info.height), (2 * PANEL_W_PX, 2 * PANEL_H_PX));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        // Something was drawn in every panel, and auto's color is there.
        let (w, h) = (info.width as usize, info.height as usize);
        for (row0, col0) in [(0, 0), (0, w / 2), (h / 2, 0), (h / 2, w / 2)] {
            let inked = (row0..row0 + h / 2)
                .flat_map(|y| (col0..col0 + w / 2).map(move |x| (y * w + x) * 3))
                .filter(|&i| rgb[i..i + 3] != [255, 255, 255])
                .count();
            assert!(inked > 2000, "panel at ({row0}, {col0}) nearly blank");
        }
        let auto = LOOKS
            .iter()
            .find(|l| l.algo == "auto")
            .map(|l| l.color)
            .unwrap();
        assert!(
            rgb.chunks(3).any(|p| p == [auto.0, auto.1, auto.2]),
            "no pixel in auto's color"
        );
    }

    /// One rank has latencies and no bus bandwidth (0): the latency
    /// panel is drawn, the other says why it is empty.
    #[test]
    fn a_world_of_one_draws_its_latency_only() {
        let one = synthetic(1, false);
        assert!(one.rows.iter().all(|r| r.busbw_gbps == 0.0));
        let png_bytes = render_png(&[one], None).unwrap();
        let (info, rgb) = decode(&png_bytes);
        let (w, h) = (info.width as usize, info.height as usize);
        let inked = |col0: usize| {
            (0..h)
                .flat_map(|y| (col0..col0 + w / 2).map(move |x| (y * w + x) * 3))
                .filter(|&i| rgb[i..i + 3] != [255, 255, 255])
                .count()
        };
        assert!(inked(0) > 2000, "latency panel nearly blank");
        let note = inked(w / 2);
        assert!(note > 0 && note < inked(0) / 4, "note panel: {note} pixels");
        // A world of two with a bandwidth of 0 is still refused.
        let mut bad = synthetic(2, false);
        bad.rows[0].busbw_gbps = 0.0;
        assert!(render_png(&[bad], None).is_err());
    }

    #[test]
    fn refuses_what_cannot_be_drawn() {
        assert!(render_png(&[], None).is_err());
        let mut bad = synthetic(2, false);
        bad.rows[0].graph_us = f64::NAN;
        assert!(render_png(&[bad], None).is_err());
    }

    #[test]
    fn ticks_and_labels() {
        assert_eq!(
            size_ticks(800.0, 5000.0),
            vec![1024.0, 4096.0],
            "powers of 4 only"
        );
        assert_eq!(size_label(1024.0), "1K");
        assert_eq!(size_label((256 << 20) as f64), "256M");
        assert_eq!(decade_ticks(3.0, 60.0), vec![5.0, 10.0, 20.0, 50.0]);
    }

    #[test]
    fn unknown_algorithms_are_drawn_before_nccl_and_auto() {
        let rows = vec![
            row(2, 1024, "nccl", 6.0),
            row(2, 1024, "three-shot", 3.0),
            row(2, 1024, "auto", 4.0),
            row(2, 1024, "lamport", 3.0),
        ];
        let order: Vec<String> = algos(&rows).into_iter().map(|a| a.0).collect();
        assert_eq!(order, ["lamport", "three-shot", "nccl", "auto"]);
        let mut rows = rows;
        rows.push(row(2, 1024, "nccl-sym", 5.0));
        let order: Vec<String> = algos(&rows).into_iter().map(|a| a.0).collect();
        assert_eq!(order, ["lamport", "three-shot", "nccl", "nccl-sym", "auto"]);
    }
}
