//! Both directions of a tunnel at once, counting bytes, until both ends have closed or
//! nothing has moved either way for the idle time. A half-close is passed on (one side's
//! EOF shuts the other's write side), so request-then-response protocols end cleanly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Copy until EOF or an error, counting into `n` and stamping `last` (ms since `t0`).
async fn pump<R, W>(mut r: R, mut w: W, n: &AtomicU64, last: &AtomicU64, t0: Instant)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let got = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(k) => k,
        };
        if w.write_all(&buf[..got]).await.is_err() {
            break;
        }
        n.fetch_add(got as u64, Ordering::Relaxed);
        last.store(ms(t0.elapsed()), Ordering::Relaxed);
    }
    let _ = w.shutdown().await;
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Returns when the tunnel has been idle for `idle`.
async fn idle_watch(last: &AtomicU64, t0: Instant, idle: Duration) {
    loop {
        let since = Duration::from_millis(last.load(Ordering::Relaxed));
        let quiet_until = since + idle;
        let now = t0.elapsed();
        if now >= quiet_until {
            return;
        }
        tokio::time::sleep(quiet_until - now).await;
    }
}

/// Splice `client` and `server`; bytes client→server go to `up`, server→client to `down`.
pub async fn splice<C, S>(client: C, server: S, up: &AtomicU64, down: &AtomicU64, idle: Duration)
where
    C: AsyncRead + AsyncWrite,
    S: AsyncRead + AsyncWrite,
{
    let t0 = Instant::now();
    let last = AtomicU64::new(0);
    let (cr, cw) = tokio::io::split(client);
    let (sr, sw) = tokio::io::split(server);
    let both = async {
        tokio::join!(pump(cr, sw, up, &last, t0), pump(sr, cw, down, &last, t0));
    };
    tokio::select! {
        _ = both => {}
        _ = idle_watch(&last, t0, idle) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn counts_both_ways_and_passes_half_close() {
        let (client, mut agent) = tokio::io::duplex(1024);
        let (server, mut far) = tokio::io::duplex(1024);
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        let peers = async {
            agent.write_all(b"hello").await.unwrap();
            agent.shutdown().await.unwrap();
            let mut got = Vec::new();
            far.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"hello");
            far.write_all(b"world!").await.unwrap();
            far.shutdown().await.unwrap();
            let mut back = Vec::new();
            agent.read_to_end(&mut back).await.unwrap();
            assert_eq!(back, b"world!");
        };
        tokio::join!(
            splice(client, server, &up, &down, Duration::from_secs(5)),
            peers
        );
        assert_eq!((up.into_inner(), down.into_inner()), (5, 6));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn ends_when_idle() {
        let (client, _agent) = tokio::io::duplex(64);
        let (server, _far) = tokio::io::duplex(64);
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        let t = Instant::now();
        let idle = Duration::from_millis(200);
        let ended = tokio::time::timeout(
            Duration::from_secs(10),
            splice(client, server, &up, &down, idle),
        )
        .await;
        assert!(ended.is_ok(), "an idle tunnel was not ended");
        assert!(t.elapsed() >= idle);
    }
}
