//! `plot`'s flags for the image's size, resolution and axes, and the drawing options they
//! make (as `budget.rs` holds serve's cost flags).

/// `plot`'s size, resolution and axes.
#[derive(Debug, clap::Args)]
pub struct LookArgs {
    /// The image's width in pixels (default: 3.5 inches at --dpi, a paper's column; two
    /// columns for results side by side).
    #[arg(long, value_name = "PIXELS")]
    pub width: Option<u32>,
    /// The image's height in pixels (default: from the width and the number of panels).
    #[arg(long, value_name = "PIXELS")]
    pub height: Option<u32>,
    /// The resolution the image is meant for, dots per inch: text is set in points (tick
    /// labels 7 pt), so a higher --dpi is larger text in pixels. 96 suits a screen.
    #[arg(long, value_name = "DPI", default_value_t = 300.0)]
    pub dpi: f64,
    /// Draw every axis to its largest value. By default an axis of values over time ends
    /// at the data's body (Tukey's outer fence + 10%, over any stretch of 5 intervals or
    /// more) when a few values lie far above it (stalls, bursts); those are marked ▲ on its
    /// top edge and the caption says how many and how high.
    #[arg(long)]
    pub full_range: bool,
    /// y axes: auto (log where the values span more than 30 times), linear or log.
    #[arg(long, value_name = "SCALE", default_value = "auto")]
    pub y_scale: YScaleArg,
}

/// `plot --y-scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum YScaleArg {
    /// Log where the values span more than 30 times, else linear.
    Auto,
    /// Linear.
    Linear,
    /// Logarithmic.
    Log,
}

impl LookArgs {
    /// How the plot is drawn.
    pub fn options(&self) -> wirebench_report::plot::Options {
        use wirebench_report::plot::YScale;
        wirebench_report::plot::Options {
            width: self.width,
            height: self.height,
            dpi: self.dpi,
            full_range: self.full_range,
            y_scale: match self.y_scale {
                YScaleArg::Auto => YScale::Auto,
                YScaleArg::Linear => YScale::Linear,
                YScaleArg::Log => YScale::Log,
            },
        }
    }
}
