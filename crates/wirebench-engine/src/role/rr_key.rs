//! What tells a UDP request/response stream's own requests and responses from forged ones
//! (issue 44). Sans-IO: bytes, and a clock read only when it is needed, in; a verdict out.
//!
//! A request's first 8 bytes are its sequence number keyed with the stream's token
//! ([`SeqToken`], as UDP data's `seq` field is), and the response echoes them. Someone who
//! can send from the client's address and port but cannot read the test's traffic writes a
//! field that decodes to a uniformly random number. The server answers and counts a request
//! only when its number is one the client can have sent by then ([`Requests`]); the client
//! takes a response as its round trip only when it carries the request in flight's field
//! ([`response`]). Everything else is `foreign`: never answered, never counted as a
//! message, never a latency sample.

use wirebench_proto::header::SeqToken;
use wirebench_proto::spec::{TestSpec, RR_SEQ_LEN};

/// How much earlier than the server's side the client's may have started, ns: the client
/// starts its roles as it sends `begin`, the server when `begin` arrives, one control
/// path's delay later. Ten seconds covers any path a test completes over.
const START_SLACK_NS: u64 = 10_000_000_000;

/// The server's check of requests: which sequence numbers the client can have sent.
///
/// Closed loop, the client sends request `k + 1` only once `k` was answered (so the server
/// took it) or timed out (after at least `ack_timeout_ns`): by the time the client's side
/// has run `t`, it has sent at most `taken + t / ack_timeout_ns + 1` requests. Open loop, it
/// sends one every `open_loop_interval_ns` whatever the answers: at most
/// `t / interval + 1`. Both stay under `taken + (t + slack) / spacing + 1` with the smaller
/// of the two times as `spacing` (at least 1 ms by the spec's bounds), so a blind guess
/// passes with a chance of about `(t / 1 ms) / 2^64`: about 2^-42 for an hour's test.
#[derive(Debug, Clone)]
pub(super) struct Requests {
    token: SeqToken,
    /// The least time a request the server never took costs the client, ns.
    spacing_ns: u64,
    /// Requests taken as the client's.
    taken: u64,
    /// Requests that were not the client's: too short to carry a number, or numbered past
    /// what the client can have sent.
    foreign: u64,
}

impl Requests {
    /// The check for a stream of `spec` keyed with `token`.
    pub(super) fn new(spec: &TestSpec, token: SeqToken) -> Self {
        let spacing_ns = spec
            .open_loop_interval_ns
            .map_or(spec.ack_timeout_ns, |every| every.min(spec.ack_timeout_ns));
        Self {
            token,
            spacing_ns: spacing_ns.max(1),
            taken: 0,
            foreign: 0,
        }
    }

    /// The request's keyed field, for the response to echo, when `request` is the client's;
    /// `None` (counted foreign) when it is not. `now_ns` (the side's time, ns since its
    /// start) is read only for a number past what the client can have sent at time 0, so a
    /// request in a test without loss costs no clock read before its answer.
    #[inline]
    pub(super) fn check(
        &mut self,
        request: &[u8],
        now_ns: impl FnOnce() -> u64,
    ) -> Option<[u8; RR_SEQ_LEN as usize]> {
        let Some(field) = request
            .get(..RR_SEQ_LEN as usize)
            .and_then(|b| <[u8; RR_SEQ_LEN as usize]>::try_from(b).ok())
        else {
            self.foreign += 1;
            return None;
        };
        let seq = self.token.decode(u64::from_be_bytes(field));
        if seq >= self.most_sent(0) && seq >= self.most_sent(now_ns()) {
            self.foreign += 1;
            return None;
        }
        self.taken += 1;
        Some(field)
    }

    /// How many requests the client can have sent when the server's side has run `now_ns`:
    /// every number below it is possible.
    fn most_sent(&self, now_ns: u64) -> u64 {
        let elapsed = now_ns.saturating_add(START_SLACK_NS);
        self.taken
            .saturating_add(elapsed / self.spacing_ns)
            .saturating_add(1)
    }

    /// Requests that were not the client's.
    pub(super) fn foreign(&self) -> u64 {
        self.foreign
    }
}

/// What a datagram that reached the client's socket is, as a response to request `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Response {
    /// The answer to `seq`: a round trip.
    Ours,
    /// The answer to an earlier request, which timed out: neither a round trip nor foreign.
    Earlier,
    /// Not the server's: too short to carry a number, or numbered past `seq`, a request the
    /// client never sent (a field not keyed with the stream's token decodes to a random
    /// number, past `seq` but with a chance of `seq / 2^64`).
    Foreign,
}

/// What `datagram` is to a client waiting for the answer to request `seq` of a stream keyed
/// with `token`.
#[inline]
pub(super) fn response(token: SeqToken, seq: u64, datagram: &[u8]) -> Response {
    let Some(field) = datagram
        .get(..RR_SEQ_LEN as usize)
        .and_then(|b| <[u8; RR_SEQ_LEN as usize]>::try_from(b).ok())
    else {
        return Response::Foreign;
    };
    let answered = token.decode(u64::from_be_bytes(field));
    match answered.cmp(&seq) {
        std::cmp::Ordering::Equal => Response::Ours,
        std::cmp::Ordering::Less => Response::Earlier,
        std::cmp::Ordering::Greater => Response::Foreign,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn token() -> SeqToken {
        SeqToken::of_stream(0x5eed_c00c_1e00_0044, 0)
    }

    /// A request of `len` bytes carrying `field`.
    fn request(field: u64, len: usize) -> Vec<u8> {
        let mut r = vec![0xa5u8; len];
        r[..8].copy_from_slice(&field.to_be_bytes());
        r
    }

    fn closed_loop() -> Requests {
        let spec = TestSpec::example().ack_timeout_ns(200 * MS);
        Requests::new(&spec, token())
    }

    #[test]
    fn the_clients_requests_are_taken_and_echoed_keyed() {
        let mut r = closed_loop();
        for seq in 0..1000 {
            let field = token().encode(seq);
            let echoed = r.check(&request(field, 64), || panic!("no clock read without loss"));
            assert_eq!(echoed, Some(field.to_be_bytes()));
        }
        assert_eq!(r.foreign(), 0);
    }

    #[test]
    fn the_issues_forged_requests_are_foreign_and_not_taken() {
        let mut r = closed_loop();
        let field = |seq| token().encode(seq);
        assert!(r.check(&request(field(0), 64), || 0).is_some());
        // The issue's attack: 20,000 requests numbered as the client numbers them, without
        // the token (as every request was before), and the same with other tokens.
        let other = SeqToken::of_stream(0x5eed_c00c_1e00_0044, 1);
        let mut forged = 0;
        for seq in 0..20_000u64 {
            for f in [seq, other.encode(seq), u64::MAX - seq, 1 << 62] {
                assert_eq!(r.check(&request(f, 64), || 3_600_000 * MS), None, "{f}");
                forged += 1;
            }
        }
        // Too short to carry a number.
        for len in 0..8 {
            assert_eq!(r.check(&request(field(1), 8)[..len], || 0), None);
            forged += 1;
        }
        assert_eq!(r.foreign(), forged);
        // The client's next request still passes, and nothing forged was taken.
        assert!(r.check(&request(field(1), 64), || 0).is_some());
        assert_eq!(r.taken, 2);
    }

    #[test]
    fn requests_after_lost_ones_pass_as_far_as_the_client_can_have_timed_out() {
        let mut r = closed_loop();
        // Nothing arrived yet: the slack's worth of timeouts (10 s / 200 ms) and one more.
        let at_start = 10_000 / 200 + 1;
        assert!(r
            .check(&request(token().encode(at_start - 1), 64), || 0)
            .is_some());
        assert_eq!(
            r.check(&request(token().encode(at_start + 1), 64), || 0),
            None
        );
        // Five seconds on, 25 more timeouts are possible (200 ms each).
        let later = at_start + 1 + 25;
        assert!(r
            .check(&request(token().encode(later - 1), 64), || 5_000 * MS)
            .is_some());
        assert_eq!(
            r.check(&request(token().encode(later + 2), 64), || 5_000 * MS),
            None
        );
        assert_eq!(r.foreign(), 2);
    }

    /// splitmix64: a seeded stream of numbers for the simulations below.
    fn next(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[test]
    fn every_request_a_closed_loop_client_sends_passes_whatever_the_path_does() {
        // In virtual time, a client as rr.rs's UdpRr: request k, then k + 1 when k's answer
        // came or its timeout passed. Each seed draws a path: loss of requests and of
        // answers (0 to 90%), one-way delays up to twice the timeout (so answers come late
        // and requests overtake each other), and a server side that started up to 2 s after
        // the client's. Every request that reaches the server, in arrival order, passes.
        for seed in 0..200u64 {
            let mut rng = seed;
            let timeout = (1 + next(&mut rng) % 500) * MS;
            let loss = next(&mut rng) % 10;
            let server_late = next(&mut rng) % (2_000 * MS);
            let spec = TestSpec::example().ack_timeout_ns(timeout);
            let (mut arrivals, mut client_ns) = (Vec::new(), 0u64);
            for seq in 0..2_000u64 {
                let there = next(&mut rng) % (2 * timeout);
                let back = next(&mut rng) % (2 * timeout);
                let request_lost = next(&mut rng) % 10 < loss;
                let answer_lost = next(&mut rng) % 10 < loss;
                if !request_lost {
                    arrivals.push((client_ns + there, seq));
                }
                let round_trip = there + back;
                client_ns += if request_lost || answer_lost || round_trip >= timeout {
                    timeout
                } else {
                    round_trip
                };
            }
            arrivals.sort_unstable();
            let mut r = Requests::new(&spec, token());
            for (client_at, seq) in arrivals {
                let server_now = client_at.saturating_sub(server_late);
                let passed = r.check(&request(token().encode(seq), 64), || server_now);
                assert!(
                    passed.is_some(),
                    "seed {seed}: request {seq} at {client_at}"
                );
            }
            assert_eq!(r.foreign(), 0, "seed {seed}");
        }
    }

    #[test]
    fn open_loop_probes_pass_at_their_schedule_whatever_was_lost() {
        // rrul's probe: every 100 ms, 2 s timeout; the server took none of the first hour's.
        let spec = TestSpec {
            open_loop_interval_ns: Some(100 * MS),
            ..TestSpec::example().ack_timeout_ns(2_000 * MS)
        };
        let mut r = Requests::new(&spec, token());
        let hour = 3_600_000 * MS;
        let sent_in_an_hour = hour / (100 * MS);
        let field = token().encode(sent_in_an_hour);
        assert!(r.check(&request(field, 64), || hour).is_some());
        let field = token().encode(sent_in_an_hour + 200);
        assert_eq!(r.check(&request(field, 64), || hour), None);
    }

    #[test]
    fn a_blind_guess_almost_never_passes() {
        // Random fields (splitmix64 as a stand-in for an attacker's guesses) an hour into a
        // test with the spec's shortest timeout: none of a million passes.
        let spec = TestSpec::example().ack_timeout_ns(MS);
        let mut r = Requests::new(&spec, token());
        let mut x = 0u64;
        for _ in 0..1_000_000 {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let guess = SeqToken::of_stream(x, 7).0;
            assert_eq!(r.check(&request(guess, 16), || 3_600_000 * MS), None);
        }
        assert_eq!(r.foreign(), 1_000_000);
    }

    #[test]
    fn the_client_takes_only_the_answer_to_its_request_in_flight() {
        let t = token();
        let answer = |seq: u64| request(t.encode(seq), 64);
        assert_eq!(response(t, 7, &answer(7)), Response::Ours);
        assert_eq!(response(t, 7, &answer(6)), Response::Earlier);
        assert_eq!(response(t, 7, &answer(0)), Response::Earlier);
        // The issue's forged responses: the number in flight without the token, or any
        // number the client has not sent yet.
        assert_eq!(response(t, 7, &request(7, 64)), Response::Foreign);
        assert_eq!(response(t, 7, &answer(8)), Response::Foreign);
        assert_eq!(response(t, 7, &answer(u64::MAX)), Response::Foreign);
        for len in 0..8 {
            assert_eq!(response(t, 7, &answer(7)[..len]), Response::Foreign);
        }
        // Another stream's answer to the same number is not this one's.
        let other = SeqToken::of_stream(0x5eed_c00c_1e00_0044, 1);
        assert_eq!(
            response(t, 7, &request(other.encode(7), 64)),
            Response::Foreign
        );
    }
}
