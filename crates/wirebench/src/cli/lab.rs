//! `wirebench lab`'s flags: the emulated link, the testbeds, scenarios.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `wirebench lab`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, after_help = crate::LAB_EXIT_CODES)]
pub struct LabArgs {
    /// Keep a testbed up, enter it, take it down, or run a scenario.
    #[command(subcommand)]
    pub action: Option<LabAction>,
    /// The link between the client host (10.77.0.1) and the server host (10.77.0.2).
    #[command(flatten)]
    pub link: LinkArgs,
    /// In `exec` mode, run this in the server host instead of `wirebench serve` (split at
    /// spaces, e.g. 'iperf3 -s').
    #[arg(long, value_name = "COMMAND")]
    pub serve: Option<String>,
    /// Log what each direction of the link does, interval by interval, as CSV to FILE
    /// (packets in, drops, delivered bytes and rate, longest queue wait); `wirebench plot
    /// FILE` draws it.
    #[arg(long, value_name = "FILE")]
    pub link_log: Option<PathBuf>,
    /// The interval of --link-log (1ms or more).
    #[arg(long, value_name = "DURATION", default_value = "100ms")]
    pub link_log_interval: String,
    /// The client host's TCP/IP stack for its test traffic: kernel, or smoltcp (user space,
    /// on a TUN device the lab makes; `run` then gets --stack smoltcp and its address).
    #[arg(long, value_name = "STACK", default_value = "kernel")]
    pub stack: wirebench_lab::user_stack::Stack,
    /// The server host's TCP/IP stack for its test traffic: kernel, or smoltcp (the lab
    /// makes its TUN device and forwards the data port to it; `wirebench serve` gets
    /// --stack smoltcp).
    #[arg(long, value_name = "STACK", default_value = "kernel")]
    pub server_stack: wirebench_lab::user_stack::Stack,
    /// What to run over the link: `run [run options]` (a wirebench test from the client host
    /// to a server in the server host) or `exec [--] COMMAND...` (any program in the client
    /// host; LAB_SERVER and LAB_CLIENT hold the two addresses).
    #[arg(last = true, value_name = "run|exec ...")]
    pub command: Vec<String>,
}

/// `wirebench lab up|exec|down|scenario`.
#[derive(Debug, Subcommand)]
pub enum LabAction {
    /// Build a testbed (one link, or a scenario's topology) and keep it until `lab down`.
    Up {
        /// Its name.
        name: String,
        /// The topology of this scenario file instead of one link.
        #[arg(long, value_name = "FILE")]
        scenario: Option<PathBuf>,
        /// The link, without --scenario.
        #[command(flatten)]
        link: Box<LinkArgs>,
    },
    /// Run a command in a host of a testbed that is up.
    Exec {
        /// The testbed.
        name: String,
        /// The host (client or server for one link; a node name of the scenario).
        host: String,
        /// The command.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Take a testbed down.
    Down {
        /// Its name.
        name: String,
    },
    /// List the testbeds that are up.
    List,
    /// (internal) The process that builds and holds a testbed for `up`.
    #[command(hide = true, name = "__hold")]
    Hold {
        /// Its name.
        name: String,
        /// The topology, as JSON.
        topology: String,
    },
    /// Run a scenario file: its topology, stack profiles and tests, for its trials.
    Scenario(ScenarioArgs),
}

/// `wirebench lab scenario`.
#[derive(Debug, Args)]
#[command(after_help = crate::LAB_EXIT_CODES)]
pub struct ScenarioArgs {
    /// The scenario (TOML).
    pub file: PathBuf,
    /// Trials per stack profile (default: the file's).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub trials: Option<u32>,
    /// Copies of the network run at once, each in namespaces of its own (default: the
    /// file's, or 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub parallel: Option<u32>,
    /// Scale every test's duration (e.g. 0.1 for a quick look).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Only these stack profiles (by name; repeat).
    #[arg(long = "profile", value_name = "NAME")]
    pub profiles: Vec<String>,
    /// Where to save the results (default: ./wirebench-results/lab-NAME-DATE-TIME).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Go on with the run in --out: trials already saved there are read, not run again
    /// (all saved: only the summary is made again).
    #[arg(long)]
    pub resume: bool,
    /// With --resume: the scenario file has new [[profile]]s, declared so; their trials
    /// are run and the others kept (every other profile, link and test as before; any
    /// other change to the file is refused, naming it).
    #[arg(long, requires = "resume")]
    pub add_profiles: bool,
    /// Run only shard I of N of the trials (trial t of profile p, of T trials each, is
    /// number p·T + t and goes to shard (p·T + t) mod N), into an --out every shard shares;
    /// `auto` reads a Slurm job array or a Kubernetes Indexed Job, as `sweep --shard auto`.
    ///
    /// A sharded run resumes by itself; once every shard is done, `lab scenario FILE --out
    /// DIR --resume` (no shard) writes the whole summary without running anything.
    #[arg(long, value_name = "I/N|auto")]
    pub shard: Option<String>,
    /// Also log every link of every trial in intervals of this length (1ms or more), as
    /// trials/NNNN-PROFILE-links.csv (the format of lab --link-log).
    #[arg(long, value_name = "DURATION")]
    pub link_log_interval: Option<String>,
}

/// One emulated link, as flags.
#[derive(Debug, Args, Clone, Default)]
pub struct LinkArgs {
    /// Link rate, bits/s, each direction (e.g. 10M; default: no limit).
    #[arg(long)]
    pub rate: Option<String>,
    /// Link rate client → server, in place of --rate (e.g. 1M, beside a --trace-down).
    #[arg(long)]
    pub rate_up: Option<String>,
    /// Link rate server → client, in place of --rate.
    #[arg(long)]
    pub rate_down: Option<String>,
    /// One-way propagation delay, each direction, with a unit (e.g. 50ms).
    #[arg(long)]
    pub delay: Option<String>,
    /// Extra random delay per packet, up to this, never reordering (e.g. 2ms).
    ///
    /// With --distribution, netem's jitter instead: delay ± this, as netem's `delay 50ms
    /// 2ms`.
    #[arg(long)]
    pub jitter: Option<String>,
    /// Random loss, each direction: a probability (0.05) or a percentage (5%).
    #[arg(long)]
    pub loss: Option<String>,
    /// Random loss client → server.
    #[arg(long)]
    pub loss_up: Option<String>,
    /// Random loss server → client.
    #[arg(long)]
    pub loss_down: Option<String>,
    /// Mean length of a loss burst, packets (Gilbert-Elliott; default 1: independent).
    #[arg(long)]
    pub loss_burst: Option<f64>,
    /// Random loss only for packets of these IP lengths, MIN-MAX bytes (e.g. 1050-1120:
    /// data, not acknowledgements); default all.
    #[arg(long, value_name = "MIN-MAX")]
    pub loss_sizes: Option<String>,
    /// Queue before the link, packets (default 1000; 0: no limit by count).
    #[arg(long)]
    pub queue: Option<u32>,
    /// Queue limit in bytes (e.g. 64K).
    #[arg(long)]
    pub queue_bytes: Option<String>,
    /// Bytes added to each IP packet's length on the wire, for the rate (e.g. 38 for
    /// Ethernet framing; default 0).
    #[arg(long)]
    pub overhead: Option<u32>,
    /// Seed of the link's random loss and jitter (default 1).
    #[arg(long)]
    pub seed: Option<u64>,
    /// The queue's discipline, in tc's syntax: droptail, drophead, codel, fq_codel or pie,
    /// with parameters (e.g. 'fq_codel target 5ms interval 100ms', 'pie target 15ms').
    ///
    /// Its limit is --queue unless it gives its own. Mahimahi's queue arguments read too
    /// ('codel packets=100,target=5,interval=100'). Default: drop-tail.
    #[arg(long, value_name = "QDISC")]
    pub aqm: Option<String>,
    /// Mark ECN-capable packets CE instead of dropping them where the --aqm would drop
    /// (PIE: while its drop probability is at most 10%).
    ///
    /// A full queue still drops.
    #[arg(long)]
    pub ecn: bool,
    /// netem's delay distribution: uniform, normal, pareto or paretonormal (iproute2's
    /// tables).
    ///
    /// Makes --jitter netem's: delay ± jitter (normal: its standard deviation), still
    /// delivered in order; as netem's `delay 50ms 5ms distribution normal`.
    #[arg(long, value_name = "NAME")]
    pub distribution: Option<String>,
    /// Correlation of each packet's delay with the one before, as netem's `delay 50ms 5ms
    /// 25%` (needs --distribution; netem's scheme: it also narrows the spread).
    #[arg(long, value_name = "PERCENT")]
    pub delay_correlation: Option<String>,
    /// Probability that a packet is sent at once, overtaking the delayed ones, as netem's
    /// `reorder 25%` (needs --delay).
    #[arg(long, value_name = "PERCENT")]
    pub reorder: Option<String>,
    /// Correlation of the reorder draws, as netem's `reorder 25% 50%`.
    #[arg(long, value_name = "PERCENT")]
    pub reorder_correlation: Option<String>,
    /// As netem's `reorder 100% gap 5`: N − 1 packets go through delayed before the next
    /// may be reordered (100%: exactly every Nth is); default 1.
    #[arg(long, value_name = "N")]
    pub reorder_gap: Option<u32>,
    /// Probability that a packet is sent twice, as netem's `duplicate 1%`.
    #[arg(long, value_name = "PERCENT")]
    pub duplicate: Option<String>,
    /// Correlation of the duplicate draws, as netem's `duplicate 1% 25%`.
    #[arg(long, value_name = "PERCENT")]
    pub duplicate_correlation: Option<String>,
    /// Probability that a packet gets one bit of its TCP/UDP payload flipped, as netem's
    /// `corrupt 0.1%`; the receiving kernel drops it as a checksum error (a UDP test reports
    /// them as checksum_errors).
    #[arg(long, value_name = "PERCENT")]
    pub corrupt: Option<String>,
    /// Correlation of the corrupt draws, as netem's `corrupt 0.1% 25%`.
    #[arg(long, value_name = "PERCENT")]
    pub corrupt_correlation: Option<String>,
    /// netem's `slot`, in its words: packets leave only in slots, e.g. '800us 1ms packets 10
    /// bytes 64K' (a slot every 0.8 to 1 ms, at most 10 packets and 64,000 bytes each) or
    /// 'distribution normal 10ms 2ms'.
    #[arg(long, value_name = "SPEC")]
    pub slot: Option<String>,
    /// A Mahimahi trace for both directions, in place of --rate: one line per delivery
    /// opportunity (a time in ms; each lets 1504 bytes leave), looped (e.g.
    /// scenarios/traces/const-12mbit).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// A Mahimahi trace client → server (mm-link's uplink trace).
    #[arg(long, value_name = "FILE")]
    pub trace_up: Option<PathBuf>,
    /// A Mahimahi trace server → client (mm-link's downlink trace).
    #[arg(long, value_name = "FILE")]
    pub trace_down: Option<PathBuf>,
    /// Offloads off on the link's interfaces, so that the emulator reads and writes one
    /// wire packet per frame.
    ///
    /// By default hosts hand it GSO frames of up to 64 KiB (TSO, UDP GSO), which it keeps
    /// whole while it charges rate, queue and loss per wire packet: the same link, at a
    /// fraction of the emulator's CPU. A scenario's links always run with offloads off.
    #[arg(long)]
    pub no_offload: bool,
}

impl LinkArgs {
    /// The link properties these flags give.
    pub fn props(&self) -> wirebench_lab::link_options::LinkProps {
        wirebench_lab::link_options::LinkProps {
            rate: self.rate.clone(),
            rate_up: self.rate_up.clone(),
            rate_down: self.rate_down.clone(),
            delay: self.delay.clone(),
            jitter: self.jitter.clone(),
            loss: self.loss.clone(),
            loss_up: self.loss_up.clone(),
            loss_down: self.loss_down.clone(),
            loss_burst: self.loss_burst,
            loss_sizes: self.loss_sizes.clone(),
            queue: self.queue,
            queue_bytes: self.queue_bytes.clone(),
            overhead: self.overhead,
            seed: self.seed,
            aqm: self.aqm.clone(),
            ecn: self.ecn.then_some(true),
            distribution: self.distribution.clone(),
            delay_correlation: self.delay_correlation.clone(),
            reorder: self.reorder.clone(),
            reorder_correlation: self.reorder_correlation.clone(),
            reorder_gap: self.reorder_gap,
            duplicate: self.duplicate.clone(),
            duplicate_correlation: self.duplicate_correlation.clone(),
            corrupt: self.corrupt.clone(),
            corrupt_correlation: self.corrupt_correlation.clone(),
            slot: self.slot.clone(),
            trace: self.trace.clone(),
            trace_up: self.trace_up.clone(),
            trace_down: self.trace_down.clone(),
        }
    }
}
