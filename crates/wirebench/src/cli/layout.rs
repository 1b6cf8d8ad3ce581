//! The command line as `main` parses it: the derived flags of `cli.rs`, laid out in groups.

use clap::{CommandFactory, FromArgMatches};

use super::Cli;

/// The command line as `main` parses it, and as `completions` and `man` describe it: the
/// derived flags, `run`'s, `sweep`'s and `serve`'s help in groups, and values that may
/// start with `-` (`-t -5` is a bad duration, not an unknown flag).
pub fn command() -> clap::Command {
    Cli::command()
        .mut_subcommand("run", |c| in_groups(c, RUN_GROUPS, "More options"))
        .mut_subcommand("sweep", |c| in_groups(c, RUN_GROUPS, "Sweep"))
        .mut_subcommand("serve", |c| in_groups(c, SERVE_GROUPS, "More options"))
}

/// Parses `args` (the program's name first) as [`command`] describes them.
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = command().try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// `run --help`'s groups, in the order they are listed: each flag (by its field's name)
/// under its heading, the common ones first. A heading's place is that of its first flag in
/// the definitions above, so the groups come out in this order.
const RUN_GROUPS: &[(&str, &[&str])] = &[
    (
        "Test",
        &[
            "port",
            "udp",
            "tcp",
            "quic",
            "time",
            "bytes",
            "blockcount",
            "rate",
            "size",
            "parallel",
            "reverse",
            "bidir",
            "omit",
            "window",
            "ipv4",
            "ipv6",
            "bind",
            "mode",
            "gap",
            "psk_file",
        ],
    ),
    (
        "Output",
        &[
            "interval",
            "json",
            "json_stream",
            "iperf3_json",
            "format",
            "verbose",
        ],
    ),
    ("UDP", &["drain", "no_offload", "packet_log"]),
    (
        "rr, crr, rrul and stop-and-wait",
        &[
            "ack_timeout",
            "response_size",
            "idle",
            "probe_interval",
            "busy_poll",
        ],
    ),
    ("TCP", &["cc", "zerocopy"]),
    (
        "QUIC",
        &[
            "quic_perf",
            "quic_pin",
            "quic_insecure",
            "quic_streams",
            "datagrams",
            "quic_zero_rtt",
            "quic_mtu",
        ],
    ),
    ("Files", &["file", "both_directions", "save"]),
    (
        "iperf3",
        &[
            "iperf3",
            "set_mss",
            "fq_rate",
            "forceflush",
            "get_server_output",
        ],
    ),
    (
        "Stacks",
        &["stack", "stack_device", "stack_addr", "stack_buffer"],
    ),
];

/// `serve --help`'s groups, as [`RUN_GROUPS`].
const SERVE_GROUPS: &[(&str, &[&str])] = &[
    (
        "Listening",
        &[
            "port",
            "bind",
            "ipv4",
            "ipv6",
            "one_off",
            "psk_file",
            "iperf3_port",
            "allow_iperf3",
            "iperf3_json",
            "no_quic",
            "quic_key",
        ],
    ),
    (
        "Server limits",
        &[
            "max_tests",
            "max_tests_per_client",
            "max_tests_per_minute",
            "max_duration",
            "max_rate",
            "max_bytes",
            "max_memory",
            "max_pps",
            "max_streams",
            "max_size",
            "max_timing",
        ],
    ),
    ("Output", &["quiet", "live", "stats", "metrics", "verbose"]),
    ("Files", &["save_dir", "save_quota", "files_dir"]),
    (
        "Stacks",
        &[
            "stack",
            "stack_device",
            "stack_addr",
            "stack_buffer",
            "stack_port",
        ],
    ),
];

/// Puts `cmd`'s flags under `groups`' headings, others under `rest` (a flag added without
/// a place there still shows).
fn in_groups(
    cmd: clap::Command,
    groups: &'static [(&'static str, &'static [&'static str])],
    rest: &'static str,
) -> clap::Command {
    cmd.mut_args(|arg| {
        let arg = negative_values(arg);
        if arg.is_positional() || matches!(arg.get_id().as_str(), "help" | "version") {
            return arg;
        }
        let place = groups.iter().find_map(|(heading, ids)| {
            let at = ids.iter().position(|id| *id == arg.get_id().as_str())?;
            Some((*heading, at))
        });
        let short = !LONG_HELP_ONLY.contains(&arg.get_id().as_str());
        match place {
            Some((heading, at)) => arg.help_heading(heading).display_order(at),
            None => arg.help_heading(rest),
        }
        .hide_short_help(!short)
    })
    // The exit codes are in --help; -h is the summary (clap's convention).
    .after_help(None::<&str>)
    .after_long_help(crate::EXIT_CODES)
}

/// Flags that `-h`'s summary leaves to `--help` (clap's convention: `-h` short, `--help`
/// whole): the rarely needed ones, each named under its heading there.
const LONG_HELP_ONLY: &[&str] = &[
    "tcp",
    "blockcount",
    "gap",
    "drain",
    "no_offload",
    "ack_timeout",
    "idle",
    "probe_interval",
    "busy_poll",
    "zerocopy",
    "exclusive",
    "both_directions",
    "save",
    "set_mss",
    "fq_rate",
    "forceflush",
    "get_server_output",
    "stack_device",
    "stack_addr",
    "stack_buffer",
    "stack_port",
    "save_quota",
    "files_dir",
    "max_timing",
    "max_size",
    "allow_iperf3",
    "iperf3_json",
    "quic_key",
    "quic_pin",
    "quic_insecure",
    "quic_streams",
    "datagrams",
    "quic_zero_rtt",
    "quic_mtu",
    "quic_perf",
];

/// A flag's value may start with `-` when it is a number: a negative one is refused by its
/// parser, in words, rather than taken for an unknown flag.
fn negative_values(arg: clap::Arg) -> clap::Arg {
    // Not the host: `run -1` is iperf3's one-off flag, answered as such.
    if arg.get_action().takes_values() && !arg.is_positional() {
        arg.allow_negative_numbers(true)
    } else {
        arg
    }
}
