//! `kestrel bench --plot`: a run against the in-process fake server draws its latency CDFs and
//! throughput over time to an SVG whose series carry the run's sample counts, or to a PNG whose
//! title and labels are rasterised from the bundled font; `--ttft-slo-ms` reaches every request
//! body; any other extension is refused before any request is sent.

use crate::support;

use kestrel_bench::{plot, run, BenchArgs, BenchError};
use support::{start, FakeConfig};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_draws_its_plot_and_sends_the_objective() {
    let server = start(FakeConfig::default()).await;
    let dir = temp_dir("plot");
    let path = dir.join("run.svg");
    let args = BenchArgs {
        base_url: server.base_url.clone(),
        num_prompts: Some(5),
        input_len: 8,
        output_len: 6,
        concurrency: Some(2),
        no_progress: true,
        plot: Some(path.clone()),
        ttft_slo_ms: Some(750),
        ..BenchArgs::default()
    };
    let report = run(args).await.expect("run");
    assert_eq!(report.successful_requests, 5);
    assert_eq!(report.samples.ttft_ms.len(), 5);
    assert_eq!(report.samples.itl_ms.len(), 25, "5 gaps per request");
    let per_second: f64 = report.samples.throughput_per_second().iter().sum();
    assert_eq!(per_second, report.total_output_tokens as f64);

    let svg = std::fs::read_to_string(&path).expect("the plot was written");
    assert!(svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for series in [
        "TTFT (5 samples)",
        "TPOT (5 samples)",
        "ITL (25 samples)",
        "E2E (5 samples)",
    ] {
        assert!(svg.contains(series), "no {series:?} in the plot");
    }
    assert!(svg.contains("Output throughput over time"));
    let json = serde_json::to_value(&report).expect("json");
    assert!(
        json.get("samples").is_none(),
        "samples stay out of the JSON"
    );

    let bodies = server.bodies();
    assert_eq!(bodies.len(), 5);
    assert!(bodies.iter().all(|b| b["ttft_slo_ms"] == 750), "{bodies:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A decoded 8-bit RGB image.
struct Rgb {
    width: u32,
    height: u32,
    pixels: Vec<u8>,
}

impl Rgb {
    fn read(path: &std::path::Path) -> Rgb {
        let file = std::fs::File::open(path).expect("the PNG was written");
        let mut reader = png::Decoder::new(std::io::BufReader::new(file))
            .read_info()
            .expect("a valid PNG header");
        let mut pixels = vec![0; reader.output_buffer_size().expect("buffer size")];
        let info = reader.next_frame(&mut pixels).expect("valid PNG data");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        pixels.truncate(info.buffer_size());
        Rgb {
            width: info.width,
            height: info.height,
            pixels,
        }
    }

    fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let i = (y * self.width + x) as usize * 3;
        [self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]]
    }

    /// Pixels in rows `rows` for which `pred` holds.
    fn count(&self, rows: std::ops::Range<u32>, pred: impl Fn([u8; 3]) -> bool) -> usize {
        rows.flat_map(|y| (0..self.width).map(move |x| (x, y)))
            .filter(|&(x, y)| pred(self.pixel(x, y)))
            .count()
    }
}

/// Black or dark grey: text, axes and borders (the series are saturated colours).
fn dark([r, g, b]: [u8; 3]) -> bool {
    r < 110 && g < 110 && b < 110
}

/// Strongly blue: the TTFT CDF and the throughput steps.
fn blue([r, g, b]: [u8; 3]) -> bool {
    b > 200 && r < 80 && g < 80
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_draws_a_png_with_rasterised_text() {
    let server = start(FakeConfig::default()).await;
    let dir = temp_dir("png");
    let path = dir.join("run.png");
    let args = BenchArgs {
        base_url: server.base_url.clone(),
        num_prompts: Some(6),
        input_len: 8,
        output_len: 6,
        concurrency: Some(2),
        no_progress: true,
        plot: Some(path.clone()),
        ..BenchArgs::default()
    };
    let report = run(args).await.expect("run");
    assert_eq!(report.successful_requests, 6);

    let image = Rgb::read(&path);
    assert_eq!((image.width, image.height), plot::SIZE);
    let all = 0..image.height;
    let white = image.count(all.clone(), |p| p == [255, 255, 255]);
    let total = (image.width * image.height) as usize;
    assert!(
        white > total / 2,
        "mostly white background: {white}/{total}"
    );
    assert!(white < total, "something was drawn");
    assert!(
        image.count(all.clone(), blue) > 200,
        "the blue series were drawn"
    );
    assert!(
        image.count(all, dark) > 5_000,
        "axes, ticks and labels were drawn"
    );

    // The same samples under a blank title of the same layout: the title band loses its ink,
    // so the ink in the run's band is the rasterised title text.
    let blank = dir.join("blank.png");
    plot::render(&report.samples, "          ", &blank).expect("render");
    let blank = Rgb::read(&blank);
    let band = 0..TITLE_BAND;
    let titled_ink = image.count(band.clone(), dark);
    let blank_ink = blank.count(band, dark);
    assert!(
        titled_ink > 300,
        "title text in the band: {titled_ink} dark pixels"
    );
    assert_eq!(blank_ink, 0, "a blank title leaves the band empty");
    // Everything below the band is the same drawing in both images.
    let below = TITLE_BAND..image.height;
    assert_eq!(image.count(below.clone(), dark), blank.count(below, dark));
    std::fs::remove_dir_all(&dir).ok();
}

/// Rows of the title above the four panels (22 px text plus its margin).
const TITLE_BAND: u32 = 24;

#[tokio::test]
async fn a_jpeg_plot_is_refused_before_the_run() {
    let server = start(FakeConfig::default()).await;
    let args = BenchArgs {
        base_url: server.base_url.clone(),
        num_prompts: Some(2),
        no_progress: true,
        plot: Some(temp_dir("jpg").join("run.jpg")),
        ..BenchArgs::default()
    };
    let err = run(args).await.expect_err("jpeg is not supported");
    assert!(matches!(err, BenchError::Plot(_)), "{err:?}");
    assert!(
        err.to_string().contains("must end in .svg or .png"),
        "{err}"
    );
    assert!(server.bodies().is_empty(), "no request was sent");
}
