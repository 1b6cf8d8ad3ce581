//! `wirebench plot` (a figure from saved results) and `wirebench packet-log` (a packet log
//! as CSV): both read what a test saved; the report crate draws and writes.

use std::io::{self, Write};

use anyhow::Context;
use wirebench_report::plot::{chart_for, chart_for_all, write_with, Kind};

use crate::cli::{PacketLogArgs, PlotArgs};
use crate::Failure;

/// Draws `args.input` (an experiment, a result, a packet log or a link log) to `args.output`.
pub fn plot(args: &PlotArgs) -> Result<(), Failure> {
    let kind = args
        .kind
        .as_deref()
        .map(Kind::parse)
        .transpose()
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let opts = args.look.options();
    // The errors name the file and say what would work: no context to add.
    let chart = if !args.more.is_empty() && !args.input.is_dir() {
        // Several results: compared side by side.
        let all: Vec<_> = std::iter::once(args.input.clone())
            .chain(args.more.iter().cloned())
            .collect();
        chart_for_all(&all, kind).map_err(|e| match e {
            wirebench_report::plot::PlotError::NotComparable(_) => Failure::Usage(e.to_string()),
            e => Failure::Runtime(e.into()),
        })?
    } else {
        // Several shard directories are merged first (the temporary copy lives until the
        // end).
        let (input, _merged) = super::merge::read_dir_of(&args.input, &args.more)?;
        chart_for(&input, kind).map_err(anyhow::Error::from)?
    };
    wirebench_report::output::clean_temps(super::report::output_dir(&args.output));
    write_with(&chart, &args.output, &opts).map_err(|e| match e {
        wirebench_report::plot::PlotError::Size(_) => Failure::Usage(e.to_string()),
        e => Failure::Runtime(e.into()),
    })?;
    Ok(())
}

/// Prints the packet log `args.file` as CSV on stdout.
pub fn packet_log(args: &PacketLogArgs) -> Result<(), Failure> {
    // A regular file only: a FIFO or a device is refused at once, never waited on.
    let file = wirebench_report::input::packet_log(&args.file).map_err(anyhow::Error::from)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    wirebench_report::export::csv::packet_log(io::BufReader::new(file), &mut out)
        .and_then(|()| out.flush().map_err(Into::into))
        .with_context(|| format!("reading {}", args.file.display()))?;
    Ok(())
}
