//! Device counters ([`LinkStats`]), as `ip -s -j link` reports them.

/// Device counters, as `ip -s -j link` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets dropped on receive (an `ifb` counts what it discards on transmit here).
    pub rx_dropped: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Packets dropped on transmit.
    pub tx_dropped: u64,
}

impl LinkStats {
    /// Parses the JSON of `ip -s -j link show dev X`.
    pub fn parse(json: &str) -> Option<LinkStats> {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        let stats = v.get(0)?.get("stats64")?;
        let n = |dir: &str, key: &str| stats.get(dir)?.get(key)?.as_u64();
        Some(LinkStats {
            rx_packets: n("rx", "packets")?,
            rx_dropped: n("rx", "dropped")?,
            tx_packets: n("tx", "packets")?,
            tx_dropped: n("tx", "dropped")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_stats_parse_fixture() {
        let json = r#"[{"ifindex":2,"ifname":"sink0","stats64":{"rx":{"bytes":0,"packets":0,"errors":0,"dropped":17,"over_errors":0,"multicast":0},"tx":{"bytes":10,"packets":3,"errors":0,"dropped":1,"carrier_errors":0,"collisions":0}}}]"#;
        assert_eq!(
            LinkStats::parse(json),
            Some(LinkStats {
                rx_packets: 0,
                rx_dropped: 17,
                tx_packets: 3,
                tx_dropped: 1
            })
        );
        assert_eq!(LinkStats::parse("[]"), None);
        assert_eq!(LinkStats::parse("not json"), None);
    }
}
