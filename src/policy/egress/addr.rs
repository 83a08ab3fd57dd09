//! Which IP addresses a run's egress may never reach, whatever its role grants: anything
//! that is not on the public internet (loopback, private, link-local, CGNAT, multicast,
//! reserved, documentation and benchmark ranges), cloud metadata services, and the host's
//! own addresses. IPv4 addresses hidden in IPv6 forms are judged as the IPv4 address they
//! lead to (IPv4-mapped, NAT64 well-known prefix, 6to4); forms whose destination cannot be
//! told from the address (Teredo, IPv4-compatible, local-use NAT64) are refused whole.
//! Pure: the host's own addresses are given by the caller.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Unspecified,
    Loopback,
    /// RFC 1918 and IPv6 unique local (fc00::/7).
    Private,
    LinkLocal,
    /// Shared address space, 100.64.0.0/10 (carrier-grade NAT).
    Cgnat,
    Multicast,
    Broadcast,
    /// 0.0.0.0/8, 240.0.0.0/4, 192.0.0.0/24, IPv6 outside global unicast, and the like.
    Reserved,
    Documentation,
    Benchmark,
    /// A cloud provider's instance metadata or platform service.
    Metadata,
    /// Teredo (2001::/32): a tunnel whose IPv4 end is obfuscated in the address.
    Teredo,
    /// A deprecated or site-specific IPv6 embedding of IPv4 whose destination depends on
    /// the network (IPv4-compatible ::/96, IPv4-translated, local-use NAT64 64:ff9b:1::/48).
    Embedding,
    /// One of this host's own addresses.
    Own,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Unspecified => "unspecified",
            Class::Loopback => "loopback",
            Class::Private => "private",
            Class::LinkLocal => "link-local",
            Class::Cgnat => "cgnat",
            Class::Multicast => "multicast",
            Class::Broadcast => "broadcast",
            Class::Reserved => "reserved",
            Class::Documentation => "documentation",
            Class::Benchmark => "benchmark",
            Class::Metadata => "cloud metadata",
            Class::Teredo => "teredo",
            Class::Embedding => "ipv4 embedding",
            Class::Own => "host's own address",
        }
    }
}

/// The IPv6 form an IPv4 address was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Mapped,
    Nat64,
    SixToFour,
}

impl Form {
    pub fn as_str(self) -> &'static str {
        match self {
            Form::Mapped => "IPv4-mapped",
            Form::Nat64 => "NAT64",
            Form::SixToFour => "6to4",
        }
    }
}

/// A refused address: its class, and the IPv6 form hiding the IPv4 address, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub class: Class,
    pub form: Option<Form>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.form {
            None => f.write_str(self.class.as_str()),
            Some(form) => write!(f, "{} (in {} form)", self.class.as_str(), form.as_str()),
        }
    }
}

/// Cloud metadata and platform services, named first so a refusal says what they are
/// (most also fall in a refused range; 168.63.129.16 does not).
pub const METADATA: &[IpAddr] = &[
    // AWS, GCP, Azure, OCI, OpenStack, DigitalOcean, Hetzner, Linode: instance metadata.
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    // AWS: ECS task metadata and credentials, Route 53 resolver, time sync.
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 2)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 23)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 253)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 123)),
    // Azure: WireServer (a public address) and IMDS's DNS.
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    // Alibaba Cloud.
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    // Tencent Cloud.
    IpAddr::V4(Ipv4Addr::new(169, 254, 0, 23)),
    // Scaleway.
    IpAddr::V4(Ipv4Addr::new(169, 254, 42, 42)),
    // Oracle Cloud (legacy) and some OpenStack deployments.
    IpAddr::V4(Ipv4Addr::new(192, 0, 0, 192)),
    // AWS over IPv6: IMDS, DNS, NTP.
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x253)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x123)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23)),
    // Scaleway over IPv6.
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x42, 0, 0, 0, 0, 0, 0x42)),
];

/// `Ok` when `ip` may be dialled: public, not metadata, not one of `own`.
pub fn check(ip: IpAddr, own: &[IpAddr]) -> Result<(), Refusal> {
    let bare = |class| Err(Refusal { class, form: None });
    if METADATA.contains(&ip) {
        return bare(Class::Metadata);
    }
    // The range first (the host's loopback is "loopback"), then the host's own.
    match ip {
        IpAddr::V4(v4) => {
            if let Some(c) = v4_class(v4) {
                return bare(c);
            }
        }
        IpAddr::V6(v6) => match v6_class(v6) {
            V6::Refused(c) => return bare(c),
            V6::Global => {}
            V6::Embeds(v4, form) => {
                return check(IpAddr::V4(v4), own).map_err(|r| Refusal {
                    class: r.class,
                    form: Some(form),
                })
            }
        },
    }
    if own.iter().any(|o| canonical(*o) == canonical(ip)) {
        return bare(Class::Own);
    }
    Ok(())
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (the kernel dials it so).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// `(network, prefix length, class)`; the first match decides.
const V4_TABLE: &[([u8; 4], u8, Class)] = &[
    ([255, 255, 255, 255], 32, Class::Broadcast),
    ([0, 0, 0, 0], 32, Class::Unspecified),
    ([0, 0, 0, 0], 8, Class::Reserved),
    ([10, 0, 0, 0], 8, Class::Private),
    ([100, 64, 0, 0], 10, Class::Cgnat),
    ([127, 0, 0, 0], 8, Class::Loopback),
    ([169, 254, 0, 0], 16, Class::LinkLocal),
    ([172, 16, 0, 0], 12, Class::Private),
    // IETF protocol assignments (DS-Lite, NAT64 discovery, PCP anycast...).
    ([192, 0, 0, 0], 24, Class::Reserved),
    ([192, 0, 2, 0], 24, Class::Documentation),
    // AS112 (RFC 7535, RFC 7534) and AMT relays (RFC 7450): special-purpose anycast.
    ([192, 31, 196, 0], 24, Class::Reserved),
    ([192, 52, 193, 0], 24, Class::Reserved),
    ([192, 175, 48, 0], 24, Class::Reserved),
    // The deprecated 6to4 relay anycast.
    ([192, 88, 99, 0], 24, Class::Reserved),
    ([192, 168, 0, 0], 16, Class::Private),
    ([198, 18, 0, 0], 15, Class::Benchmark),
    ([198, 51, 100, 0], 24, Class::Documentation),
    ([203, 0, 113, 0], 24, Class::Documentation),
    ([224, 0, 0, 0], 4, Class::Multicast),
    ([240, 0, 0, 0], 4, Class::Reserved),
];

fn v4_class(ip: Ipv4Addr) -> Option<Class> {
    let a = u32::from(ip);
    V4_TABLE.iter().find_map(|(net, len, class)| {
        let mask = if *len == 0 { 0 } else { u32::MAX << (32 - len) };
        (a & mask == u32::from_be_bytes(*net) & mask).then_some(*class)
    })
}

enum V6 {
    Global,
    Refused(Class),
    /// Leads to this IPv4 address.
    Embeds(Ipv4Addr, Form),
}

/// `(network, prefix length, class)` for IPv6 ranges refused whole; checked after the
/// embedding forms, before the global-unicast test.
const V6_TABLE: &[([u16; 8], u8, Class)] = &[
    ([0, 0, 0, 0, 0, 0, 0, 0], 128, Class::Unspecified),
    ([0, 0, 0, 0, 0, 0, 0, 1], 128, Class::Loopback),
    // IPv4-compatible (deprecated): the kernel routes it as IPv6, to who knows where.
    ([0, 0, 0, 0, 0, 0, 0, 0], 96, Class::Embedding),
    // IPv4-translated (SIIT).
    ([0, 0, 0, 0, 0xffff, 0, 0, 0], 96, Class::Embedding),
    // Local-use NAT64: the network decides where it goes.
    ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, Class::Embedding),
    ([0x0100, 0, 0, 0, 0, 0, 0, 0], 64, Class::Reserved),
    ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, Class::Teredo),
    ([0x2001, 0x2, 0, 0, 0, 0, 0, 0], 48, Class::Benchmark),
    // ORCHID and ORCHIDv2: identifiers, not locators.
    ([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, Class::Reserved),
    ([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, Class::Reserved),
    // The rest of the IETF protocol assignments (AS112, AMT, ...): none is a destination.
    ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, Class::Reserved),
    ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, Class::Documentation),
    ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, Class::Documentation),
    // SRv6 segment identifiers.
    ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, Class::Reserved),
    ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, Class::Private),
    ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, Class::LinkLocal),
    // Site-local (deprecated, still private in practice).
    ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, Class::Private),
    ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Class::Multicast),
];

fn in_v6(ip: Ipv6Addr, net: [u16; 8], len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    };
    u128::from(ip) & mask == u128::from(Ipv6Addr::from(net)) & mask
}

fn v6_class(ip: Ipv6Addr) -> V6 {
    let o = ip.octets();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return V6::Embeds(v4, Form::Mapped);
    }
    // The NAT64 well-known prefix carries the IPv4 address in its last 32 bits.
    if in_v6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        return V6::Embeds(Ipv4Addr::new(o[12], o[13], o[14], o[15]), Form::Nat64);
    }
    // 6to4 carries it in bits 16..48.
    if in_v6(ip, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        return V6::Embeds(Ipv4Addr::new(o[2], o[3], o[4], o[5]), Form::SixToFour);
    }
    if let Some((_, _, class)) = V6_TABLE.iter().find(|(n, l, _)| in_v6(ip, *n, *l)) {
        return V6::Refused(*class);
    }
    // Everything else outside global unicast (2000::/3) is unassigned or reserved.
    if in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        V6::Global
    } else {
        V6::Refused(Class::Reserved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(s: &str, own: &[IpAddr]) -> Result<(), Refusal> {
        check(s.parse().expect("test address parses"), own)
    }

    #[test]
    fn the_table() {
        use Class::*;
        let r = |class| Err(Refusal { class, form: None });
        let hidden = |class, form| {
            Err(Refusal {
                class,
                form: Some(form),
            })
        };
        let cases: &[(&str, Result<(), Refusal>)] = &[
            // Public.
            ("93.184.215.14", Ok(())),
            ("1.1.1.1", Ok(())),
            ("11.1.2.3", Ok(())),
            ("100.63.255.255", Ok(())),
            ("100.128.0.0", Ok(())),
            ("172.15.255.255", Ok(())),
            ("172.32.0.0", Ok(())),
            ("192.0.3.1", Ok(())),
            ("198.17.255.255", Ok(())),
            ("198.20.0.0", Ok(())),
            ("223.255.255.255", Ok(())),
            ("2606:4700:4700::1111", Ok(())),
            ("2001:200::1", Ok(())),
            ("2001:4860:4860::8888", Ok(())),
            ("2a00:1450:4001:80b::200e", Ok(())),
            // IPv4 ranges.
            ("0.0.0.0", r(Unspecified)),
            ("0.1.2.3", r(Reserved)),
            ("10.0.0.1", r(Private)),
            ("10.255.255.255", r(Private)),
            ("100.64.0.1", r(Cgnat)),
            ("100.127.255.254", r(Cgnat)),
            ("127.0.0.1", r(Loopback)),
            ("127.255.0.9", r(Loopback)),
            ("169.254.1.1", r(LinkLocal)),
            ("172.16.0.1", r(Private)),
            ("172.31.255.255", r(Private)),
            ("192.0.0.8", r(Reserved)),
            ("192.0.2.1", r(Documentation)),
            ("192.88.99.1", r(Reserved)),
            ("192.31.196.1", r(Reserved)),
            ("192.52.193.1", r(Reserved)),
            ("192.175.48.1", r(Reserved)),
            ("192.168.1.1", r(Private)),
            ("198.18.0.1", r(Benchmark)),
            ("198.19.255.255", r(Benchmark)),
            ("198.51.100.7", r(Documentation)),
            ("203.0.113.9", r(Documentation)),
            ("224.0.0.1", r(Multicast)),
            ("239.255.255.250", r(Multicast)),
            ("240.0.0.1", r(Reserved)),
            ("255.255.255.254", r(Reserved)),
            ("255.255.255.255", r(Broadcast)),
            // Metadata, named as such even inside a refused range.
            ("169.254.169.254", r(Metadata)),
            ("169.254.170.2", r(Metadata)),
            ("168.63.129.16", r(Metadata)),
            ("100.100.100.200", r(Metadata)),
            ("fd00:ec2::254", r(Metadata)),
            ("::ffff:169.254.169.254", hidden(Metadata, Form::Mapped)),
            ("64:ff9b::a9fe:a9fe", hidden(Metadata, Form::Nat64)),
            ("2002:a9fe:a9fe::1", hidden(Metadata, Form::SixToFour)),
            // IPv6 ranges.
            ("::", r(Unspecified)),
            ("::1", r(Loopback)),
            ("::127.0.0.1", r(Embedding)),
            ("::8.8.8.8", r(Embedding)),
            ("::ffff:0:8.8.8.8", r(Embedding)),
            ("64:ff9b:1::808:808", r(Embedding)),
            ("100::1", r(Reserved)),
            ("2001::1", r(Teredo)),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", r(Teredo)),
            ("2001:2::1", r(Benchmark)),
            ("2001:1::1", r(Reserved)),
            ("2001:4:112::1", r(Reserved)),
            ("2001:1ff::1", r(Reserved)),
            ("2001:10::1", r(Reserved)),
            ("2001:20::1", r(Reserved)),
            ("2001:db8::1", r(Documentation)),
            ("3fff::1", r(Documentation)),
            ("5f00::1", r(Reserved)),
            ("fc00::1", r(Private)),
            ("fd12:3456::1", r(Private)),
            ("fe80::1", r(LinkLocal)),
            ("febf::1", r(LinkLocal)),
            ("fec0::1", r(Private)),
            ("ff02::1", r(Multicast)),
            ("4000::1", r(Reserved)),
            ("1::1", r(Reserved)),
            // IPv4 hidden in IPv6.
            ("::ffff:127.0.0.1", hidden(Loopback, Form::Mapped)),
            ("::ffff:10.0.0.1", hidden(Private, Form::Mapped)),
            ("::ffff:192.168.0.1", hidden(Private, Form::Mapped)),
            ("::ffff:0.0.0.0", hidden(Unspecified, Form::Mapped)),
            ("::ffff:8.8.8.8", Ok(())),
            ("64:ff9b::7f00:1", hidden(Loopback, Form::Nat64)),
            ("64:ff9b::10.1.2.3", hidden(Private, Form::Nat64)),
            ("64:ff9b::8.8.8.8", Ok(())),
            ("2002:7f00:1::", hidden(Loopback, Form::SixToFour)),
            ("2002:c0a8:101::1", hidden(Private, Form::SixToFour)),
            ("2002:0808:0808::1", Ok(())),
        ];
        for (addr, want) in cases {
            assert_eq!(&verdict(addr, &[]), want, "{addr}");
        }
    }

    #[test]
    fn the_hosts_own_addresses_in_any_form() {
        let own: Vec<IpAddr> = vec![
            "11.0.0.5".parse().unwrap(),
            "2a01::5".parse().unwrap(),
            "127.0.0.1".parse().unwrap(),
        ];
        let refused = |a: &str| verdict(a, &own).map_err(|r| r.class);
        assert_eq!(refused("11.0.0.5"), Err(Class::Own));
        assert_eq!(refused("::ffff:11.0.0.5"), Err(Class::Own));
        assert_eq!(refused("64:ff9b::b00:5"), Err(Class::Own));
        assert_eq!(refused("2a01::5"), Err(Class::Own));
        assert_eq!(refused("11.0.0.6"), Ok(()));
        // The host's loopback is named for its range.
        assert_eq!(refused("127.0.0.1"), Err(Class::Loopback));
        // The host's own address given in mapped form matches its IPv4 form too.
        let own: Vec<IpAddr> = vec!["::ffff:11.0.0.7".parse().unwrap()];
        assert_eq!(
            verdict("11.0.0.7", &own).map_err(|r| r.class),
            Err(Class::Own)
        );
    }

    #[test]
    fn refusals_read_well() {
        let r = verdict("::ffff:10.0.0.1", &[]).unwrap_err();
        assert_eq!(r.to_string(), "private (in IPv4-mapped form)");
        assert_eq!(
            verdict("127.0.0.1", &[]).unwrap_err().to_string(),
            "loopback"
        );
    }

    proptest::proptest! {
        /// Every IPv4-mapped address is judged exactly as its IPv4 address.
        #[test]
        fn mapped_is_judged_as_ipv4(a: u32) {
            let v4 = Ipv4Addr::from(a);
            let plain = check(IpAddr::V4(v4), &[]).map_err(|r| r.class);
            let mapped = check(IpAddr::V6(v4.to_ipv6_mapped()), &[]).map_err(|r| r.class);
            proptest::prop_assert_eq!(plain, mapped);
        }
    }
}
