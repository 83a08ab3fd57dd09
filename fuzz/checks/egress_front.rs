// The egress proxy's reading of where a request wants to go, and of a tunnel's first bytes.
// Input: one selector byte, then the text or bytes. Invariants:
// - a CONNECT authority (or absolute-form host) that parse_authority accepts reads back the
//   same from its own spelling, and hyper (which the router and the GitHub route read it
//   with) finds the same host and port in it: the route and the policy see one target;
// - a ClientHello's server name is lower case without a trailing dot, and bytes after a
//   complete ClientHello never change what was read from it (the gateway decides as soon
//   as the message is whole).
use std::net::IpAddr;

use airlock::gateway::egress::client_hello::{self, Parse};
use airlock::gateway::egress::target::{parse_authority, Host};

pub fn check(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        authority(sel, rest);
    } else {
        hello(sel, rest);
    }
}

fn authority(sel: u8, rest: &[u8]) {
    let Ok(s) = std::str::from_utf8(rest) else {
        return;
    };
    let default = if sel & 2 == 0 { None } else { Some(80) };
    let Some(t) = parse_authority(s, default) else {
        return;
    };
    assert_ne!(t.port, 0, "port 0 accepted: {s:?}");
    let again = match &t.host {
        Host::Ip(IpAddr::V6(a)) => format!("[{a}]:{}", t.port),
        h => format!("{}:{}", h.text(), t.port),
    };
    assert_eq!(
        parse_authority(&again, None).as_ref(),
        Some(&t),
        "{s:?} reads back otherwise as {again:?}"
    );
    if let Ok(a) = s.parse::<hyper::http::uri::Authority>() {
        let h = a.host().trim_start_matches('[').trim_end_matches(']');
        let h = h.strip_suffix('.').unwrap_or(h).to_ascii_lowercase();
        match &t.host {
            Host::Name(n) => assert_eq!(&h, n, "hyper reads another host in {s:?}"),
            Host::Ip(ip) => assert_eq!(
                h.parse::<IpAddr>().ok(),
                Some(*ip),
                "hyper reads another address in {s:?}"
            ),
        }
        if let Some(p) = a.port_u16() {
            assert_eq!(p, t.port, "hyper reads another port in {s:?}");
        }
    }
}

fn hello(sel: u8, buf: &[u8]) {
    let whole = client_hello::parse(buf);
    if let Parse::Hello {
        server_name: Some(n),
    } = &whole
    {
        assert!(!n.ends_with('.'), "a trailing dot kept: {n:?}");
        assert_eq!(n, &n.to_ascii_lowercase(), "a server name not lower case");
    }
    // What a prefix of the bytes decided, the whole must decide the same.
    let cut = (usize::from(sel >> 1) * buf.len()) / 128;
    if let Parse::Hello { server_name } = client_hello::parse(&buf[..cut.min(buf.len())]) {
        assert_eq!(
            whole,
            Parse::Hello { server_name },
            "bytes after a whole ClientHello changed what it said"
        );
    }
}
