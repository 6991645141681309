//! Network addresses: which ones are private (never reached on an organization's behalf unless the operator says
//! so), trusted proxies as CIDR ranges, and the client address behind them (`X-Forwarded-For`).

use std::net::{IpAddr, Ipv4Addr};

/// Whether `ip` is loopback, private, link-local, unique-local, unspecified, shared (CGNAT), reserved, multicast or
/// broadcast: an address an outside service has no business pointing the server at. IPv6 addresses that carry an
/// IPv4 address inside them — NAT64 (`64:ff9b::/96`, local-use `64:ff9b:1::/48`), IPv4-compatible (`::a.b.c.d`),
/// SIIT (`::ffff:0:a.b.c.d`), 6to4 (`2002::/16`), Teredo (`2001::/32`) — are internal whatever they carry: a translator
/// or relay decides where they land, so `64:ff9b::a9fe:a9fe` would be the cloud metadata service. Only IPv4-mapped
/// (`::ffff:a.b.c.d`) counts as its IPv4 address: a socket to it *is* a socket to that IPv4 address.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_internal_v4(v4),
            None => {
                let s = v6.segments();
                let bits = u128::from(v6);
                let within = |prefix: u128, len: u32| bits >> (128 - len) == prefix >> (128 - len);
                v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    // fc00::/7 unique local, fe80::/10 link-local, fec0::/10 (deprecated) site-local.
                    || (s[0] & 0xfe00) == 0xfc00
                    || (s[0] & 0xffc0) == 0xfe80
                    || (s[0] & 0xffc0) == 0xfec0
                    // ::/96 IPv4-compatible (deprecated) and ::ffff:0:0:0/96 SIIT.
                    || within(0, 96)
                    || within(0xffff_0000u128 << 32, 96)
                    // 64:ff9b::/96 NAT64, 64:ff9b:1::/48 local-use NAT64.
                    || within(0x0064_ff9bu128 << 96, 96)
                    || within(0x0064_ff9b_0001u128 << 80, 48)
                    // 2002::/16 6to4, 2001::/32 Teredo.
                    || s[0] == 0x2002
                    || (s[0] == 0x2001 && s[1] == 0)
                    // 100::/64 discard-only, 2001:db8::/32 documentation.
                    || within(0x0100u128 << 112, 64)
                    || (s[0] == 0x2001 && s[1] == 0x0db8)
            }
        },
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        // 100.64.0.0/10: carrier-grade NAT, internal to a provider's network.
        || (a == 100 && (64..128).contains(&b))
        // 192.0.0.0/24 protocol assignments (NAT64 discovery, DS-Lite), 198.18.0.0/15 benchmarking, 240.0.0.0/4 reserved.
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240
}

/// Whether a URL host (name or address literal, IPv6 with or without brackets) is a loopback one.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// An address range: `10.0.0.0/8`, `2001:db8::/32`, or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ADDRESS` or `ADDRESS/PREFIX`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let network: IpAddr = addr.parse().map_err(|_| format!("{text:?} is not an IP address or CIDR range"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| format!("{text:?}: bad prefix"))?,
            None => max,
        };
        Ok(Self { network, prefix })
    }

    /// Parses a comma-separated list (empty entries are skipped).
    pub fn parse_list(text: &str) -> Result<Vec<Self>, String> {
        text.split(',').filter(|s| !s.trim().is_empty()).map(Self::parse).collect()
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// The client's address: the TCP peer, unless the peer is a trusted proxy — then the right-most
/// `X-Forwarded-For` entry that is not itself a trusted proxy (entries further left are whatever the client
/// claimed, so they are never believed). Every `X-Forwarded-For` header counts, in order.
pub fn client_address<'a>(peer: IpAddr, forwarded_for: impl Iterator<Item = &'a str>, trusted: &[Cidr]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    let hops: Vec<&str> = forwarded_for.flat_map(|h| h.split(',')).map(str::trim).collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        // A garbled entry ends the chain: nothing left of it can be trusted to mean anything.
        let Some(ip) = parse_hop(hop) else { break };
        client = ip;
        if !is_trusted(ip) {
            break;
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`1.2.3.4:5678`, `[::1]:80`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    hop.rsplit_once(':').and_then(|(ip, _)| ip.parse::<Ipv4Addr>().ok()).map(IpAddr::V4)
}

/// Which addresses an outbound client may reach (the identity provider's issuer policy, the webhooks' policy).
pub trait AddressPolicy: Copy + Send + Sync + 'static {
    /// What is being reached, for the log (`identity provider`, `webhook`).
    const WHAT: &'static str;
    /// `Err` with the reason when `ip` may not be reached.
    fn check_address(&self, ip: IpAddr) -> Result<(), String>;
}

/// A DNS resolver for outbound clients: a name that resolves to an address the policy refuses is not reached — so a
/// DNS answer changed after the settings were saved reaches nothing inside.
pub struct GuardedResolver<P>(pub P);

impl<P: AddressPolicy> reqwest::dns::Resolve for GuardedResolver<P> {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs.iter().find(|a| policy.check_address(a.ip()).is_err()) {
                tracing::warn!(host, address = %bad.ip(), what = P::WHAT, "host resolves to an internal address; refused");
                return Err(format!("{host} resolves to an internal address").into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_recognised() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_internal(ip(a)), "{a}");
        }
        // Every IPv6 form that carries an IPv4 address inside, whatever it carries (issue 33 item 6).
        for a in [
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::8.8.8.8",
            "64:ff9b:1::10.0.0.1",
            "::169.254.169.254",
            "::8.8.8.8",
            "::ffff:0:127.0.0.1",
            "2002:a9fe:a9fe::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "100::1",
            "2001:db8::1",
            "198.18.0.1",
            "192.0.0.170",
            "240.0.0.1",
        ] {
            assert!(is_internal(ip(a)), "{a}");
        }
        for a in ["8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:1.1.1.1", "2001:4860::8888"] {
            assert!(!is_internal(ip(a)), "{a}");
        }
        assert!(is_loopback_host("localhost") && is_loopback_host("127.0.0.5") && is_loopback_host("[::1]"));
        assert!(!is_loopback_host("idp.example") && !is_loopback_host("10.0.0.1"));
    }

    #[test]
    fn cidr_ranges_parse_and_match() {
        let r = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(r.contains(ip("10.200.1.1")) && !r.contains(ip("11.0.0.1")));
        assert!(r.contains(ip("::ffff:10.0.0.9")), "an IPv4-mapped peer is its IPv4 address");
        let one = Cidr::parse("192.0.2.7").unwrap();
        assert!(one.contains(ip("192.0.2.7")) && !one.contains(ip("192.0.2.8")));
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(ip("2001:db8:1::5")) && !v6.contains(ip("2001:db9::1")) && !v6.contains(ip("10.0.0.1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("203.0.113.1")));
        assert!(Cidr::parse("10.0.0.0/33").is_err() && Cidr::parse("example.com").is_err());
        assert_eq!(Cidr::parse_list(" 10.0.0.1, ,192.168.0.0/16").unwrap().len(), 2);
        assert_eq!(Cidr::parse_list("").unwrap(), vec![]);
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted = Cidr::parse_list("10.0.0.0/8").unwrap();
        let client = |peer: &str, xff: &[&str]| client_address(ip(peer), xff.iter().copied(), &trusted);
        // An untrusted peer: its own address, whatever it claims.
        assert_eq!(client("203.0.113.9", &["198.51.100.1"]), ip("203.0.113.9"));
        // A trusted proxy: the right-most entry that is not a trusted proxy.
        assert_eq!(client("10.0.0.2", &["198.51.100.1"]), ip("198.51.100.1"));
        assert_eq!(client("10.0.0.2", &["6.6.6.6, 198.51.100.1, 10.0.0.3"]), ip("198.51.100.1"));
        // Several headers are one list, in order.
        assert_eq!(client("10.0.0.2", &["6.6.6.6", "198.51.100.1"]), ip("198.51.100.1"));
        // Spoofed entries left of the real client are ignored.
        assert_eq!(client("10.0.0.2", &["1.1.1.1, 198.51.100.1"]), ip("198.51.100.1"));
        // Ports and brackets are tolerated; garbage stops the walk at the last good hop.
        assert_eq!(client("10.0.0.2", &["198.51.100.1:4711"]), ip("198.51.100.1"));
        assert_eq!(client("10.0.0.2", &["[2001:db8::1]:443"]), ip("2001:db8::1"));
        assert_eq!(client("10.0.0.2", &["nonsense"]), ip("10.0.0.2"));
        assert_eq!(client("10.0.0.2", &["1.1.1.1, nonsense, 10.0.0.4"]), ip("10.0.0.4"));
        // No header: the proxy itself.
        assert_eq!(client("10.0.0.2", &[]), ip("10.0.0.2"));
        // Nothing trusted (the default): the peer, always.
        assert_eq!(client_address(ip("10.0.0.2"), ["198.51.100.1"].into_iter(), &[]), ip("10.0.0.2"));
    }
}
