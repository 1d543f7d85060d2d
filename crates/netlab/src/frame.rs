//! Ethernet frames built by hand, for the packet rings' tests and benches (a TX ring sends
//! whole frames, header included).

/// An Ethernet II frame carrying IPv4 and UDP from `src` to `dst` (`sport` to `dport`), with a
/// correct IPv4 header checksum and no UDP checksum (zero, which IPv4 allows). The frame is
/// `42 + payload.len()` bytes long (no FCS, as a packet socket sees it); `payload` is at most
/// 65 507 bytes, the most an IPv4 length field can carry.
pub fn udp_v4(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    ports: (u16, u16),
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADERS + payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = u16::try_from(20 + 8 + payload.len()).unwrap_or(u16::MAX);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&ports.0.to_be_bytes());
    f.extend_from_slice(&ports.1.to_be_bytes());
    f.extend_from_slice(&(total - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// Ethernet, IPv4 and UDP headers: the bytes of a frame before its payload.
pub const HEADERS: usize = 14 + 20 + 8;

/// `n` UDP frames from the veth lab's A (198.18.0.1) to B (198.18.0.2), port 9, of 64 flows
/// (source ports 40000 to 40063), so that a multiqueue device's TX queue, chosen by the flow's
/// hash, varies; each payload is 50 random bytes (from `seed`) led by the frame's index, big
/// endian ([`flow_index`]).
pub fn udp_flows(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let noise = crate::pattern::random_bytes(n * 50, seed);
    (0..n)
        .map(|i| {
            let mut payload = noise[i * 50..(i + 1) * 50].to_vec();
            payload[..4].copy_from_slice(&(i as u32).to_be_bytes());
            udp_v4(
                [0x02, 0, 0, 0, 0, 0xb],
                [0x02, 0, 0, 0, 0, 0xa],
                [198, 18, 0, 1],
                [198, 18, 0, 2],
                (40_000 + (i % 64) as u16, 9),
                &payload,
            )
        })
        .collect()
}

/// The index a frame of [`udp_flows`] carries.
pub fn flow_index(frame: &[u8]) -> Option<u32> {
    let b = frame.get(HEADERS..HEADERS + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The Internet checksum (RFC 1071) of `bytes`; an odd count is padded with a zero byte.
pub fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let b: Vec<u8> = s
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).ok())
        .collect::<Option<_>>()?;
    b.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_layout_and_ip_checksum() {
        let f = udp_v4(
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            [198, 18, 0, 1],
            [198, 18, 0, 2],
            (40_001, 9),
            &[0xab; 22],
        );
        assert_eq!(f.len(), 64);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 50);
        // A header with its checksum in place sums to zero.
        assert_eq!(checksum(&f[14..34]), 0);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), 9);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 30);
        assert_eq!(&f[42..], &[0xab; 22]);
        assert_eq!(checksum(&[0x01]), !0x0100);
    }

    #[test]
    fn mac_parsing() {
        assert_eq!(
            parse_mac("02:7a:63:00:00:ff"),
            Some([2, 0x7a, 0x63, 0, 0, 0xff])
        );
        assert_eq!(parse_mac("02:7a:63:00:00"), None);
        assert_eq!(parse_mac("02:7a:63:00:00:zz"), None);
    }
}
