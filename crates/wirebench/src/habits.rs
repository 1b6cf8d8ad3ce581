//! What someone used to iperf3 types. Its flags that wirebench has are accepted under
//! iperf3's letters (`cli.rs`); those it has not are answered here, in one line naming
//! wirebench's way, where clap would suggest a similar-looking flag of another meaning
//! (`--title` → `--file`). No error suggests `-- -Z` either: that makes the flag the host.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// iperf3's flags that `run` (client) has no equivalent for, and what to do instead.
const RUN: &[(&[&str], &str)] = &[
    (
        &["-T", "--title"],
        "iperf3's -T/--title prefixes each line: wirebench has no title; prefix them \
         yourself (... | sed 's/^/TITLE: /'), or keep each --json document in a file of its own",
    ),
    (
        &["--logfile"],
        "iperf3's --logfile is a redirect here: wirebench run HOST > FILE 2>&1 (with --json \
         for the document)",
    ),
    (
        &["--timestamps"],
        "iperf3's --timestamps: --json-stream writes each interval as it ends, with its start \
         and end; or pipe the lines through `ts` (moreutils)",
    ),
    (
        &["-A", "--affinity"],
        "iperf3's -A/--affinity: pin wirebench with taskset (taskset -c 1 wirebench run HOST)",
    ),
    (
        &["-S", "--tos", "--dscp"],
        "iperf3's -S/--tos and --dscp: wirebench does not mark its packets (TOS/DSCP)",
    ),
    (
        &["-N", "--no-delay"],
        "iperf3's -N/--no-delay: wirebench sets TCP_NODELAY where it matters, in --mode rr and \
         crr; streams write whole -l messages",
    ),
    (
        &["--cport"],
        "iperf3's --cport: wirebench's client ports are the kernel's; -B sets the local address",
    ),
    (
        &["--bind-dev"],
        "iperf3's --bind-dev: -B ADDRESS picks the interface by its address",
    ),
    (
        &["--username", "--rsa-public-key-path"],
        "wirebench authenticates with a pre-shared key: --psk-file FILE (or WIREBENCH_PSK)",
    ),
    (
        &["--udp-counters-64bit"],
        "wirebench's UDP sequence numbers are 64-bit already: leave --udp-counters-64bit out",
    ),
    (
        &["--extra-data"],
        "iperf3's --extra-data: wirebench's documents carry no string of yours; add it after, \
         e.g. wirebench run HOST --json | jq '. + {extra_data: \"...\"}'",
    ),
    (
        &["--pacing-timer"],
        "iperf3's --pacing-timer: wirebench paces in 50 us quanta, with no timer to set; \
         leave it out",
    ),
    (
        &["--sctp", "--nstreams", "-X", "--xbind"],
        "that is iperf3's SCTP: wirebench measures TCP (the default) and UDP (-u)",
    ),
    (
        &["-L", "--flowlabel"],
        "iperf3's -L/--flowlabel: wirebench does not set IPv6 flow labels",
    ),
    (
        &["--snd-timeout"],
        "iperf3's --snd-timeout: wirebench sets no TCP_USER_TIMEOUT; a stalled test ends at \
         its time bound and --drain, and says which side stopped",
    ),
    (
        &["--rcv-timeout"],
        "iperf3's --rcv-timeout: the receiver waits --drain for data in flight once the \
         sender is done (e.g. --drain 5s)",
    ),
    (
        &["--cntl-ka"],
        "iperf3's --cntl-ka: wirebench's control connection needs no keepalive from you: \
         every wait on it has a deadline; leave it out",
    ),
    (
        &["--gsro"],
        "iperf3's --gsro: wirebench uses UDP GSO and GRO wherever the kernel has them (the \
         results' datapath says which); --no-offload turns them off",
    ),
    (
        &["--skip-rx-copy"],
        "iperf3's --skip-rx-copy: wirebench's receiver reads every byte it counts; leave it out",
    ),
    (
        &["-m", "--mptcp"],
        "iperf3's -m/--mptcp: wirebench measures plain TCP and UDP, not MPTCP",
    ),
    (
        &["--no-fq-socket-pacing"],
        "iperf3's --no-fq-socket-pacing: wirebench uses fq pacing only with --fq-rate (against \
         an iperf3 server); leave it out",
    ),
    (
        &["--time-skew-threshold", "--use-pkcs1-padding"],
        "wirebench authenticates with a pre-shared key: --psk-file FILE (or WIREBENCH_PSK)",
    ),
    (
        &["--json-stream-full-output"],
        "iperf3's --json-stream-full-output: --json-stream writes each event and then the whole \
         document as its `end` event",
    ),
    (
        &["--connect-timeout"],
        "iperf3's --connect-timeout: wirebench gives a connection 10 s to set up, then says \
         which step failed; for less, wrap it: timeout 3 wirebench run HOST",
    ),
    (
        &["-v"],
        "iperf3's -v is wirebench --version (run -V is the verbose output, as iperf3's -V)",
    ),
    (
        &["--repeating-payload"],
        "iperf3's --repeating-payload: wirebench's payload is already a fixed pattern \
         after each message's header, never random; leave the flag out",
    ),
    (
        &["--dont-fragment"],
        "iperf3's --dont-fragment: wirebench's UDP datagrams go with the kernel's path MTU \
         discovery (DF set up to the route's MTU); keep -l under the path MTU (1472 on Ethernet)",
    ),
    (
        &["-1", "--one-off", "-D", "--daemon"],
        "that is a server flag of iperf3: `wirebench serve` takes -1 (one test, then exit); \
         run it as a service to keep it in the background",
    ),
];

/// iperf3's server flags that `serve` has no equivalent for, and what to do instead.
const SERVE: &[(&[&str], &str)] = &[
    (
        &["-D", "--daemon"],
        "iperf3's -D/--daemon: run `wirebench serve` as a service (systemd), or `nohup \
         wirebench serve &`; it logs one line per test on stderr",
    ),
    (
        &["-I", "--pidfile"],
        "iperf3's -I/--pidfile: wirebench writes no pid file; its service manager (systemd) \
         or the shell's $! knows it",
    ),
    (
        &["--logfile"],
        "iperf3's --logfile is a redirect here: wirebench serve 2> FILE (one line per test, \
         on stderr)",
    ),
    (
        &["-J", "--json"],
        "iperf3's -s -J: the server logs one logfmt line per test on stderr (--metrics for \
         Prometheus); the client's --json prints the whole document, both sides",
    ),
    (
        &["--idle-timeout"],
        "iperf3's --idle-timeout: `wirebench serve` ends a test 30 s after its client's last \
         byte and a handshake after 10 s, whatever the client does",
    ),
    (
        &["--server-bitrate-limit"],
        "iperf3's --server-bitrate-limit is --max-rate here (e.g. --max-rate 1G)",
    ),
    (
        &["--rsa-private-key-path", "--authorized-users-path"],
        "wirebench authenticates with a pre-shared key: --psk-file FILE",
    ),
    (
        &["--forceflush", "--timestamps"],
        "wirebench serve flushes each line as it prints it; its log lines start with time=",
    ),
];

/// The error to show for a command line clap refused: one line for an iperf3 flag
/// wirebench does without, else clap's own without a `-- ARG` tip. `argv`: the program's
/// arguments, to tell which subcommand it was.
pub fn explain(err: clap::Error, argv: &[std::ffi::OsString]) -> clap::Error {
    if err.kind() == ErrorKind::UnknownArgument {
        if let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) {
            if let Some(line) = pointer(subcommand(argv), arg) {
                return clap::Error::raw(ErrorKind::UnknownArgument, format!("{line}\n"));
            }
        }
    }
    without_trailing_tip(err)
}

/// The subcommand argv names (its first word that is not a flag), if any.
fn subcommand(argv: &[std::ffi::OsString]) -> &str {
    argv.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| !a.starts_with('-'))
        .unwrap_or("")
}

/// The line for iperf3's `arg` (as clap saw it: `-T`, `--title`, `--title=x`) under `sub`.
fn pointer(sub: &str, arg: &str) -> Option<&'static str> {
    let table = match sub {
        "run" => RUN,
        "serve" => SERVE,
        _ => return None,
    };
    let flag = arg.split('=').next().unwrap_or(arg);
    table
        .iter()
        .find(|(flags, _)| flags.contains(&flag))
        .map(|(_, line)| *line)
}

/// `err` without clap's tip "to pass '-Z' as a value, use '-- -Z'": wirebench's one
/// positional is the host, which a mistyped flag never is.
fn without_trailing_tip(err: clap::Error) -> clap::Error {
    let Some(ContextValue::StyledStrs(tips)) = err.get(ContextKind::Suggested) else {
        return err;
    };
    let kept: Vec<_> = tips
        .iter()
        .filter(|t| !t.to_string().contains("as a value, use"))
        .cloned()
        .collect();
    if kept.len() == tips.len() {
        return err;
    }
    let mut out = clap::Error::new(err.kind()).with_cmd(&crate::cli::command());
    for (kind, value) in err.context() {
        if kind != ContextKind::Suggested {
            out.insert(kind, value.clone());
        }
    }
    if !kept.is_empty() {
        out.insert(ContextKind::Suggested, ContextValue::StyledStrs(kept));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(args: &[&str]) -> String {
        let argv: Vec<std::ffi::OsString> = std::iter::once("wirebench")
            .chain(args.iter().copied())
            .map(Into::into)
            .collect();
        match crate::cli::parse_from(&argv) {
            Ok(_) => String::new(),
            Err(e) => explain(e, &argv).to_string(),
        }
    }

    /// Each of iperf3's flags in the tables gets its line, never clap's `--` tip or a
    /// similar flag of another meaning.
    #[test]
    fn every_iperf3_flag_in_the_tables_gets_its_line() {
        for (sub, table) in [("run", RUN), ("serve", SERVE)] {
            for (flags, line) in table {
                for flag in *flags {
                    let args: &[&str] = if flag.starts_with("--") {
                        &[sub, flag, "x"]
                    } else {
                        &[sub, flag]
                    };
                    let text = error_of(args);
                    assert!(text.contains(line), "{sub} {flag}: {text}");
                    assert!(!text.contains("-- "), "{sub} {flag}: {text}");
                }
            }
        }
    }

    #[test]
    fn no_error_suggests_passing_a_flag_after_double_dash() {
        for args in [
            &["run", "-t", "-5"][..],
            &["run", "h", "--no-such-flag"],
            &["run", "-Q"],
            &["serve", "--no-such-flag"],
        ] {
            let text = error_of(args);
            assert!(!text.is_empty(), "{args:?}");
            assert!(!text.contains("as a value"), "{args:?}: {text}");
        }
        // A negative number is a value its parser refuses.
        assert!(error_of(&["run", "-t", "-5"]).contains("--time"));
    }
}
