//! The HTML report as a reader sees it: a sweep against a server that refuses one of its
//! points, reported, and drawn by headless Chromium. The screenshot is kept in
//! `target/test-artifacts/report.png` (with the `report.html` it shows), so that CI keeps
//! what the report looked like; the test checks that it is a real picture and that the
//! warnings the terminal printed are in the report, in a box that shows.
//!
//! It needs Chromium: `#[ignore = "needs chromium"]`, run by `.ci/run`, which installs it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::wirebench;
use serde_json::Value;

/// Where the test's pictures are kept: `target/test-artifacts/`, beside the directory
/// cargo gives integration tests for their files (`target/tmp`).
fn artifacts() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().unwrap_or(tmp).join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("artifacts directory");
    dir
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wirebench-report-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A PNG's width, height and pixels as RGB.
fn decode(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let file = std::fs::File::open(path).expect("open the PNG");
    let mut decoder = png::Decoder::new(file);
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    let pixels = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| match channels {
            1 | 2 => [p[0]; 3],
            _ => [p[0], p[1], p[2]],
        })
        .collect();
    (info.width, info.height, pixels)
}

/// Whether `a` is `b` give or take `tolerance` in each channel (Chromium's colour
/// management may move a colour by a little).
fn near(a: [u8; 3], b: [u8; 3], tolerance: u8) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= tolerance)
}

#[test]
#[ignore = "needs chromium"]
fn the_report_carries_the_warnings_and_chromium_draws_it() {
    let chromium = common::require_chromium();
    // The server takes 50 Mbit/s at most: the 79.4 Mbit/s point is refused, every time.
    let server = common::Server::start(&["--max-rate", "50M"]);
    let dir = tempdir("chromium");
    let exp = dir.join("exp");
    let sweep = || {
        wirebench()
            .args(["sweep", "127.0.0.1", "--port", &server.port.to_string()])
            .args(["-u", "-n", "200K", "--vary", "rate=10M,79370053"])
            .args([
                "--vary",
                "size=1472",
                "--repeat",
                "2",
                "--pause",
                "10ms",
                "--out",
            ])
            .arg(&exp)
            .output()
            .expect("run the sweep")
    };
    let out = sweep();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(3), "some trials failed: {err}");
    // A rerun measures the refused trials again: they are "measured again" as well.
    let out = sweep();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    // What the terminal warned of, the list the report shows.
    let limit = "warning: rate 79.4 Mbit/s, size 1472 B: the server's --max-rate refused or \
                 stopped 2 trials";
    assert!(err.contains(limit), "{err}");
    let warnings: Value =
        serde_json::from_slice(&std::fs::read(exp.join("warnings.json")).expect("warnings"))
            .expect("warnings.json is JSON");
    let kinds: Vec<(u64, &str)> = warnings
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|w| Some((w["point"].as_u64()?, w["kind"].as_str()?)))
        .collect();
    for kind in ["failed_trials", "limit_hit", "retried"] {
        assert!(kinds.contains(&(2, kind)), "{kind}: {kinds:?}");
    }
    // The CSV keeps its columns and gives the rate in bits/s, named with its unit.
    let csv = std::fs::read_to_string(exp.join("summary.csv")).expect("summary.csv");
    let header = csv.lines().next().unwrap_or_default();
    assert!(header.starts_with("rate,size,trials,failed,"), "{header}");
    assert!(header.ends_with(",rate_bps,size_bytes"), "{header}");

    let html_path = artifacts().join("report.html");
    let out = wirebench()
        .arg("report")
        .arg(&exp)
        .arg("-o")
        .arg(&html_path)
        .output()
        .expect("run report");
    assert!(out.status.success(), "{}", text(&out).1);
    let html = std::fs::read_to_string(&html_path).expect("the report");
    // The warning box at the top, before the tables, and one beside the refused row.
    let top = html
        .find("<div class=\"warn\" id=\"warnings\">")
        .expect("the top box");
    assert!(top < html.find("<h2>Summary</h2>").expect("a summary"));
    assert!(
        html.contains("<tr id=\"p2\" class=\"w\">"),
        "the refused row is marked"
    );
    assert!(
        html.contains("<strong>server limit hit</strong>: the server&#39;s --max-rate")
            || html.contains("<strong>server limit hit</strong>: the server's --max-rate")
    );
    assert!(html.contains("<strong>trials measured again</strong>"));
    assert!(
        html.contains("exceeds the server"),
        "the server's own reason"
    );
    // Rates in SI units in the cells and the warnings, never the number as given.
    assert!(html.contains("<td class=\"l\">79.4 Mbit/s</td>"), "{html}");
    assert!(!html.contains(">79370053<") && html.contains(">rate 79.4 Mbit/s, size 1472 B</a>"));
    // Every plot has its note.
    assert!(html.matches("In this plot,").count() >= 2);

    let shot = artifacts().join("report.png");
    let _ = std::fs::remove_file(&shot);
    let profile = dir.join("chromium-profile");
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--hide-scrollbars",
            "--window-size=1280,2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", html_path.display()))
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium: {}", text(&out).1);
    let size = std::fs::metadata(&shot).expect("the screenshot").len();
    assert!(
        size > 30_000,
        "{size} bytes: too small for a page of tables and plots"
    );
    let (w, h, pixels) = decode(&shot);
    assert_eq!((w, h), (1280, 2000));
    // Not blank: many colours (text, tables, the plots' palette, the warning box).
    let mut colours: Vec<[u8; 3]> = pixels.iter().map(|p| p.map(|c| c & 0xf0)).collect();
    colours.sort_unstable();
    colours.dedup();
    assert!(
        colours.len() >= 40,
        "{} distinct colours: a blank page?",
        colours.len()
    );
    // The warning box shows: its amber bar (#c76b00) is drawn, in the top third.
    let amber = pixels
        .iter()
        .position(|p| near(*p, [0xc7, 0x6b, 0x00], 24))
        .map(|i| i as u32 / w);
    assert!(
        amber.is_some_and(|row| row < h / 3),
        "the amber warning bar is at row {amber:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("screenshot: {}", shot.display());
}
