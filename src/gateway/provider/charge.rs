//! What a model request costs the run: its worst case is reserved when it is forwarded, and
//! the exchange is settled (charged, journaled) once, when it ends, however it ends: the
//! answer read to its end, cut short on either side, abandoned by the agent before the
//! answer's headers (hyper then drops the request's handler, and with it this guard), or
//! failed upstream. Nothing the provider was sent goes uncharged.
//!
//! Charged: the provider's own count when it came whole; otherwise the request's worst case
//! for what is not known (the output at the request's limit, the input at its estimate
//! unless the provider said it); nothing for a request that never reached the provider or
//! that it refused (an error status).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::gateway::provider::usage::{Meter, Seen};
use crate::gateway::provider::ProviderRecord;
use crate::gateway::CallLog;
use crate::policy::prices::{ModelPrice, Usage};

/// The run's spend and model requests so far.
#[derive(Debug, Default)]
pub struct Account {
    /// What settled requests cost.
    pub spent_micro_usd: AtomicU64,
    /// The reserves of the requests in flight.
    pub reserved_micro_usd: AtomicU64,
    pub requests: AtomicU64,
    pub refused: AtomicU64,
    /// Model turns forwarded (`run.max_turns`): every request that is metered.
    pub turns: AtomicU64,
    /// Taken to reserve and to settle, so no two requests take the same room.
    book: Mutex<()>,
}

/// Why a metered request may not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// `run.max_turns` turns were forwarded already.
    Turns { taken: u64 },
    /// Its worst case does not fit: the spend and the reserves in flight now.
    Budget { spent: u64, reserved: u64 },
}

impl Account {
    /// Start a metered request: take a turn if fewer than `max_turns` were taken, and
    /// reserve `micro` if the run's spend, every reserve in flight and this one stay within
    /// `budget`. Both or neither, under one lock, so requests racing each other cannot
    /// together pass either limit.
    pub fn begin(&self, micro: u64, budget: u64, max_turns: u64) -> Result<(), Over> {
        let _book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let taken = self.turns.load(Ordering::SeqCst);
        if taken >= max_turns {
            return Err(Over::Turns { taken });
        }
        let spent = self.spent_micro_usd.load(Ordering::SeqCst);
        let reserved = self.reserved_micro_usd.load(Ordering::SeqCst);
        if spent.saturating_add(reserved).saturating_add(micro) > budget {
            return Err(Over::Budget { spent, reserved });
        }
        self.reserved_micro_usd.fetch_add(micro, Ordering::SeqCst);
        self.turns.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Release a reserve and charge what the request cost; the spend after it.
    fn settle(&self, reserved: u64, cost: u64) -> u64 {
        let _book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let spent = self
            .spent_micro_usd
            .fetch_add(cost, Ordering::SeqCst)
            .saturating_add(cost);
        let _ = self
            .reserved_micro_usd
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                Some(r.saturating_sub(reserved))
            });
        spent
    }
}

/// How an exchange with the provider ended (`AIRLOCK_OUTCOME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Refused by the gateway: never forwarded.
    Refused,
    /// The answer was read to its end.
    Completed,
    /// The answer stopped short: the provider's side broke off, or the agent went away.
    Cut,
    /// The agent went away before the answer's headers came.
    Abandoned,
    /// The provider could not be reached: the request never left.
    Unreachable,
    /// Sent, but no answer came (an error or a timeout after the request went out).
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Refused => "refused",
            Outcome::Completed => "completed",
            Outcome::Cut => "cut",
            Outcome::Abandoned => "abandoned",
            Outcome::Unreachable => "unreachable",
            Outcome::Failed => "failed",
        }
    }
}

/// A request's worst case, reserved when it is forwarded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserve {
    /// Input tokens, estimated ([`crate::policy::prices::input_estimate`]).
    pub input: u64,
    /// Output tokens: the request's own limit, or the model's `max_output`.
    pub output: u64,
    /// Web searches the request lets the provider run
    /// ([`crate::policy::provider_tools::searches`]).
    pub web_search: u64,
    pub micro_usd: u64,
}

impl Reserve {
    pub fn new(price: &ModelPrice, input: u64, output: u64, web_search: u64) -> Reserve {
        Reserve {
            input,
            output,
            web_search,
            micro_usd: price
                .worst(input, output)
                .saturating_add(price.searches(web_search)),
        }
    }
}

/// What an exchange is charged: the usage counted, whether it is the provider's final
/// count, and the cost. `seen`: what the answer said of its usage (None: no answer that
/// costs, such as an error status). Pure.
pub fn charge(
    price: &ModelPrice,
    reserve: &Reserve,
    outcome: Outcome,
    seen: Option<Seen>,
) -> (Usage, bool, u64) {
    let seen = match (outcome, seen) {
        // Sent, and nothing known: the provider may have done all of it.
        (Outcome::Abandoned | Outcome::Failed, _) => Seen::default(),
        (_, None) => return (Usage::default(), true, 0),
        (_, Some(s)) if s.complete => return (s.usage, true, price.cost(&s.usage)),
        (_, Some(s)) => s,
    };
    let mut usage = seen.usage;
    usage.output = usage.output.max(reserve.output);
    // Like its output, the searches a cut answer was let run may have run all the same.
    usage.web_search = usage.web_search.max(reserve.web_search);
    let output_side = Usage { input: 0, ..usage };
    let input_cost = if seen.input_known {
        price.cost(&Usage {
            input: usage.input,
            ..Usage::default()
        })
    } else {
        usage.input = reserve.input;
        price.worst(reserve.input, 0)
    };
    let cost = price.cost(&output_side).saturating_add(input_cost);
    (usage, false, cost)
}

/// One forwarded request until it is settled. Dropped unsettled (the handler dropped
/// before the answer came, the answer's body dropped before its end), it settles as
/// abandoned or cut.
pub struct Exchange {
    rec: ProviderRecord,
    price: ModelPrice,
    reserve: Reserve,
    account: Arc<Account>,
    log: Arc<dyn CallLog>,
    started: Instant,
    /// The answer's usage meter: a successful answer of an endpoint that costs.
    meter: Option<Meter>,
    /// How the exchange ends if nothing says otherwise.
    unsaid: Outcome,
    settled: bool,
}

impl Exchange {
    /// `rec`: the allowed request's record; `reserve`: what [`Account::reserve`] took.
    pub fn new(
        rec: ProviderRecord,
        price: ModelPrice,
        reserve: Reserve,
        account: Arc<Account>,
        log: Arc<dyn CallLog>,
        started: Instant,
    ) -> Exchange {
        let mut rec = rec;
        rec.reserve_micro_usd = reserve.micro_usd;
        Exchange {
            rec,
            price,
            reserve,
            account,
            log,
            started,
            meter: None,
            unsaid: Outcome::Abandoned,
            settled: false,
        }
    }

    /// The answer's headers came: its status, whether it streams, and its meter.
    pub fn answered(&mut self, status: u16, streamed: bool, meter: Option<Meter>) {
        self.rec.status = status;
        self.rec.streamed = streamed;
        self.rec.first_byte_ms = crate::gateway::provider::ms(self.started.elapsed());
        self.meter = meter;
        self.unsaid = Outcome::Cut;
    }

    /// Settle now: charge, release the reserve, journal. Once.
    pub fn end(&mut self, outcome: Outcome, reason: &str) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        let seen = self.meter.as_mut().map(Meter::finish);
        let (usage, last, cost) = charge(&self.price, &self.reserve, outcome, seen);
        let rec = &mut self.rec;
        if matches!(outcome, Outcome::Unreachable | Outcome::Failed) {
            // The agent gets the gateway's own 502.
            rec.status = 502;
        }
        rec.outcome = outcome;
        rec.usage = usage;
        rec.usage_final = last;
        rec.cost_micro_usd = cost;
        if !reason.is_empty() {
            rec.reason = reason.to_string();
        }
        rec.spent_micro_usd = self.account.settle(self.reserve.micro_usd, cost);
        rec.duration_ms = crate::gateway::provider::ms(self.started.elapsed());
        self.log.provider(rec.clone());
    }

    fn feed(&mut self, data: &[u8]) {
        if let Some(m) = self.meter.as_mut() {
            m.feed(data);
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        let reason = match self.unsaid {
            Outcome::Abandoned => "the agent went away before the answer came",
            _ => "the answer stopped before its end",
        };
        self.end(self.unsaid, reason);
    }
}

/// A provider's answer on its way to the agent: each frame passed on as it comes, its
/// bytes shown to the exchange's meter; the exchange settles at the end, on an error, or
/// when the agent goes away (dropped).
pub struct MeteredBody {
    inner: Incoming,
    exchange: Exchange,
}

impl MeteredBody {
    pub fn new(inner: Incoming, exchange: Exchange) -> MeteredBody {
        MeteredBody { inner, exchange }
    }
}

impl Body for MeteredBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.exchange.feed(data);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.exchange
                    .end(Outcome::Cut, "the provider's answer broke off");
                Poll::Ready(Some(Err(std::io::Error::other(e))))
            }
            Poll::Ready(None) => {
                this.exchange.end(Outcome::Completed, "");
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    // Not `is_end_stream`: the end must be polled for, so the exchange settles as
    // completed, not cut.

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// claude-sonnet-4-5's prices.
    const SONNET: ModelPrice = ModelPrice {
        input: 3_000_000,
        output: 15_000_000,
        cache_write: 3_750_000,
        cache_read: 300_000,
        max_output: 64_000,
        web_search: 10_000,
    };

    #[test]
    fn an_exchange_is_charged_its_count_or_its_worst_case_for_what_is_unknown() {
        let r = Reserve::new(&SONNET, 1000, 64_000, 0);
        // 1000 in at the cache write rate, 64000 out: the review's $0.96 and the input.
        assert_eq!(r.micro_usd, 3_750 + 960_000);
        let full = Seen {
            usage: Usage {
                input: 10,
                output: 20,
                cache_write: 0,
                cache_read: 0,
                web_search: 0,
            },
            input_known: true,
            complete: true,
        };
        assert_eq!(
            charge(&SONNET, &r, Outcome::Completed, Some(full)),
            (full.usage, true, 30 + 300)
        );
        // Abandoned before the headers: the whole reserve, whatever was said.
        for o in [Outcome::Abandoned, Outcome::Failed] {
            let (u, last, cost) = charge(&SONNET, &r, o, None);
            assert_eq!(
                (u.input, u.output, last, cost),
                (1000, 64_000, false, r.micro_usd)
            );
        }
        // Nothing for a request that never left, or that the provider refused.
        for o in [
            Outcome::Unreachable,
            Outcome::Completed,
            Outcome::Cut,
            Outcome::Refused,
        ] {
            assert_eq!(charge(&SONNET, &r, o, None).2, 0, "{o:?}");
        }
        // Cut after Anthropic's message_start: its input as said, the output at the limit.
        let start = Seen {
            usage: Usage {
                input: 12,
                output: 1,
                cache_write: 0,
                cache_read: 4000,
                web_search: 0,
            },
            input_known: true,
            complete: false,
        };
        let (u, last, cost) = charge(&SONNET, &r, Outcome::Cut, Some(start));
        assert_eq!(
            (u.input, u.output, u.cache_read, last),
            (12, 64_000, 4000, false)
        );
        assert_eq!(cost, 36 + 960_000 + 1_200);
        // Cut OpenAI stream: nothing said, so the input is the estimate.
        let (u, _, cost) = charge(&SONNET, &r, Outcome::Cut, Some(Seen::default()));
        assert_eq!((u.input, u.output, cost), (1000, 64_000, r.micro_usd));
    }

    #[test]
    fn reserves_keep_the_spend_and_everything_in_flight_within_the_budget() {
        let a = Account::default();
        let over = |spent, reserved| Err(Over::Budget { spent, reserved });
        assert_eq!(a.begin(60, 100, 9), Ok(()));
        assert_eq!(a.begin(50, 100, 9), over(0, 60));
        assert_eq!(a.begin(40, 100, 9), Ok(()));
        assert_eq!(a.settle(60, 10), 10);
        assert_eq!(a.reserved_micro_usd.load(Ordering::SeqCst), 40);
        assert_eq!(a.begin(50, 100, 9), Ok(()));
        assert_eq!(a.begin(1, 100, 9), over(10, 90));
        // Refused requests took no turn.
        assert_eq!(a.turns.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn the_turn_past_max_turns_is_refused_and_reserves_nothing() {
        let a = Account::default();
        for _ in 0..3 {
            assert_eq!(a.begin(1, 100, 3), Ok(()));
        }
        assert_eq!(a.begin(1, 100, 3), Err(Over::Turns { taken: 3 }));
        assert_eq!(a.reserved_micro_usd.load(Ordering::SeqCst), 3);
        assert_eq!(a.begin(0, 100, 0), Err(Over::Turns { taken: 3 }));
    }
}
