//! Tests of the QUIC Initial reader (mod.rs, initial.rs).
//!
//! The RFC 9001 and RFC 9369 Appendix A vectors below are the RFCs' hex, copied from their
//! source text (quicwg/base-drafts rfc9001.md, quicwg/quic-v2 rfc9369.md) in the RFCs'
//! layout. They were also checked with an independent implementation (Python's
//! `cryptography` package): its keys match Appendix A.1, it opens both RFCs' client and
//! server Initial packets to the appendices' payloads, and re-protecting those payloads
//! gives the RFCs' packets byte for byte.
//!
//! The same Python implementation made the packets after the RFC vectors (EXTRA_CLIENT,
//! EXTRA_SERVER_V2, STREAM_IN_INITIAL, RESERVED_BITS). Described here, not kept as a file:
//!
//! ```text
//! hmac256(k, m) = HMAC-SHA256; extract(salt, ikm) = hmac256(salt, ikm)
//! expand(prk, info, n): T(i) = hmac256(prk, T(i-1) | info | i), first n bytes
//! label(prk, l, n) = expand(prk, u16(n) | u8(len("tls13 " + l)) | "tls13 " + l | 00, n)
//! keys(v, dcid, client): sec = label(extract(salt_v, dcid), "client in"/"server in", 32);
//!     key, iv, hp = label(sec, "quic key"/"quic iv"/"quic hp" (v2: "quicv2 …"), 16/12/16)
//! protect(v, client, key_dcid, dcid, scid, pn, pn_len, payload, token):
//!     first = 0xc0 | initial_type_bits(v) << 4 | (pn_len - 1)
//!     hdr = first | version | len(dcid) | dcid | len(scid) | scid | varint(len(token)) | token
//!           | varint(pn_len + len(payload) + 16) | pn (pn_len bytes)
//!     ct = AESGCM(key).encrypt(iv ^ pn (as 12 bytes), payload, aad = hdr)
//!     mask = AES-ECB(hp, (hdr | ct)[pn_offset + 4 .. pn_offset + 20])
//!     first ^= mask[0] & 0x0f; pn bytes ^= mask[1 .. 1 + pn_len]
//! EXTRA_CLIENT = protect(1, client, dcid 0011223344556677 (also the key material),
//!     scid aabbcc, pn 0x1f in 1 byte, token "tok", frames:
//!     PING | CRYPTO(5, "world") | ACK_ECN(largest 1000, delay 25, 2 ranges, first 3,
//!     (gap 1, len 2), (gap 4, len 0), ECT0 70000, ECT1 1, CE 300) | CRYPTO(0, "hello")
//!     | CONNECTION_CLOSE 0x1c(code 0x0a, frame type 0x06, "secret reason") | 40 x PADDING)
//! EXTRA_SERVER_V2 = protect(2, server, key dcid 0011223344556677, dcid aabbcc,
//!     scid ddeeff00, pn 0x0102 in 3 bytes, frames:
//!     CONNECTION_CLOSE 0x1d(code 0x12345, empty reason) | CRYPTO(300, "abcd") | 20 x PADDING)
//! STREAM_IN_INITIAL = protect(1, client, dcid 0011223344556677, no scid, pn 0 in 1 byte,
//!     frames: CRYPTO(0, "x") | STREAM 0x08(stream 0, "y") | 30 x PADDING)
//! RESERVED_BITS = as protect(1, client, dcid 0011223344556677, pn 7 in 1 byte,
//!     24 x PADDING) but with the first byte's reserved bit 0x04 set before protection
//! ```
use super::{initial::*, *};
use crate::wire::tls::{
    self,
    hello::{parse_client_hello, Offer, Resumption, ALPN_OTHER},
};

/// Bytes from hex, whitespace ignored.
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s
        .bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .map(|b| (b as char).to_digit(16).expect("hex digit") as u8)
        .collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    digits.chunks(2).map(|p| p[0] << 4 | p[1]).collect()
}

/// The client-chosen Destination Connection ID of both RFCs' vectors.
const DCID: [u8; 8] = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
/// The server's Source Connection ID in both RFCs' vectors.
const SERVER_SCID: [u8; 8] = [0xf0, 0x67, 0xa5, 0x50, 0x2a, 0x42, 0x62, 0xb5];
/// The Destination Connection ID (and key material) of the generated packets.
const GEN_DCID: [u8; 8] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77];

/// RFC 9001 Appendix A: client crypto frame.
const V1_CLIENT_CRYPTO_FRAME: &str = "
    060040f1010000ed0303ebf8fa56f129 39b9584a3896472ec40bb863cfd3e868
    04fe3a47f06a2b69484c000004130113 02010000c000000010000e00000b6578
    616d706c652e636f6dff01000100000a 00080006001d00170018001000070005
    04616c706e0005000501000000000033 00260024001d00209370b2c9caa47fba
    baf4559fedba753de171fa71f50f1ce1 5d43e994ec74d748002b000302030400
    0d0010000e0403050306030203080408 050806002d00020101001c0002400100
    3900320408ffffffffffffffff050480 00ffff07048000ffff08011001048000
    75300901100f088394c8f03e51570806 048000ffff
";
/// RFC 9001 Appendix A: client packet.
const V1_CLIENT_PACKET: &str = "
    c000000001088394c8f03e5157080000 449e7b9aec34d1b1c98dd7689fb8ec11
    d242b123dc9bd8bab936b47d92ec356c 0bab7df5976d27cd449f63300099f399
    1c260ec4c60d17b31f8429157bb35a12 82a643a8d2262cad67500cadb8e7378c
    8eb7539ec4d4905fed1bee1fc8aafba1 7c750e2c7ace01e6005f80fcb7df6212
    30c83711b39343fa028cea7f7fb5ff89 eac2308249a02252155e2347b63d58c5
    457afd84d05dfffdb20392844ae81215 4682e9cf012f9021a6f0be17ddd0c208
    4dce25ff9b06cde535d0f920a2db1bf3 62c23e596d11a4f5a6cf3948838a3aec
    4e15daf8500a6ef69ec4e3feb6b1d98e 610ac8b7ec3faf6ad760b7bad1db4ba3
    485e8a94dc250ae3fdb41ed15fb6a8e5 eba0fc3dd60bc8e30c5c4287e53805db
    059ae0648db2f64264ed5e39be2e20d8 2df566da8dd5998ccabdae053060ae6c
    7b4378e846d29f37ed7b4ea9ec5d82e7 961b7f25a9323851f681d582363aa5f8
    9937f5a67258bf63ad6f1a0b1d96dbd4 faddfcefc5266ba6611722395c906556
    be52afe3f565636ad1b17d508b73d874 3eeb524be22b3dcbc2c7468d54119c74
    68449a13d8e3b95811a198f3491de3e7 fe942b330407abf82a4ed7c1b311663a
    c69890f4157015853d91e923037c227a 33cdd5ec281ca3f79c44546b9d90ca00
    f064c99e3dd97911d39fe9c5d0b23a22 9a234cb36186c4819e8b9c5927726632
    291d6a418211cc2962e20fe47feb3edf 330f2c603a9d48c0fcb5699dbfe58964
    25c5bac4aee82e57a85aaf4e2513e4f0 5796b07ba2ee47d80506f8d2c25e50fd
    14de71e6c418559302f939b0e1abd576 f279c4b2e0feb85c1f28ff18f58891ff
    ef132eef2fa09346aee33c28eb130ff2 8f5b766953334113211996d20011a198
    e3fc433f9f2541010ae17c1bf202580f 6047472fb36857fe843b19f5984009dd
    c324044e847a4f4a0ab34f719595de37 252d6235365e9b84392b061085349d73
    203a4a13e96f5432ec0fd4a1ee65accd d5e3904df54c1da510b0ff20dcc0c77f
    cb2c0e0eb605cb0504db87632cf3d8b4 dae6e705769d1de354270123cb11450e
    fc60ac47683d7b8d0f811365565fd98c 4c8eb936bcab8d069fc33bd801b03ade
    a2e1fbc5aa463d08ca19896d2bf59a07 1b851e6c239052172f296bfb5e724047
    90a2181014f3b94a4e97d117b4381303 68cc39dbb2d198065ae3986547926cd2
    162f40a29f0c3c8745c0f50fba3852e5 66d44575c29d39a03f0cda721984b6f4
    40591f355e12d439ff150aab7613499d bd49adabc8676eef023b15b65bfc5ca0
    6948109f23f350db82123535eb8a7433 bdabcb909271a6ecbcb58b936a88cd4e
    8f2e6ff5800175f113253d8fa9ca8885 c2f552e657dc603f252e1a8e308f76f0
    be79e2fb8f5d5fbbe2e30ecadd220723 c8c0aea8078cdfcb3868263ff8f09400
    54da48781893a7e49ad5aff4af300cd8 04a6b6279ab3ff3afb64491c85194aab
    760d58a606654f9f4400e8b38591356f bf6425aca26dc85244259ff2b19c41b9
    f96f3ca9ec1dde434da7d2d392b905dd f3d1f9af93d1af5950bd493f5aa731b4
    056df31bd267b6b90a079831aaf579be 0a39013137aac6d404f518cfd4684064
    7e78bfe706ca4cf5e9c5453e9f7cfd2b 8b4c8d169a44e55c88d4a9a7f9474241
    e221af44860018ab0856972e194cd934
";
/// RFC 9001 Appendix A: server payload.
const V1_SERVER_PAYLOAD: &str = "
    02000000000600405a020000560303ee fce7f7b37ba1d1632e96677825ddf739
    88cfc79825df566dc5430b9a045a1200 130100002e00330024001d00209d3c94
    0d89690b84d08a60993c144eca684d10 81287c834d5311bcf32bb9da1a002b00
    020304
";
/// RFC 9001 Appendix A: server packet.
const V1_SERVER_PACKET: &str = "
    cf000000010008f067a5502a4262b500 4075c0d95a482cd0991cd25b0aac406a
    5816b6394100f37a1c69797554780bb3 8cc5a99f5ede4cf73c3ec2493a1839b3
    dbcba3f6ea46c5b7684df3548e7ddeb9 c3bf9c73cc3f3bded74b562bfb19fb84
    022f8ef4cdd93795d77d06edbb7aaf2f 58891850abbdca3d20398c276456cbc4
    2158407dd074ee
";
/// RFC 9001 Appendix A: retry.
const V1_RETRY: &str = "
    ff000000010008f067a5502a4262b574 6f6b656e04a265ba2eff4d829058fb3f
    0f2496ba
";
/// RFC 9369 Appendix A: client packet.
const V2_CLIENT_PACKET: &str = "
    d76b3343cf088394c8f03e5157080000 449ea0c95e82ffe67b6abcdb4298b485
    dd04de806071bf03dceebfa162e75d6c 96058bdbfb127cdfcbf903388e99ad04
    9f9a3dd4425ae4d0992cfff18ecf0fdb 5a842d09747052f17ac2053d21f57c5d
    250f2c4f0e0202b70785b7946e992e58 a59ac52dea6774d4f03b55545243cf1a
    12834e3f249a78d395e0d18f4d766004 f1a2674802a747eaa901c3f10cda5500
    cb9122faa9f1df66c392079a1b40f0de 1c6054196a11cbea40afb6ef5253cd68
    18f6625efce3b6def6ba7e4b37a40f77 32e093daa7d52190935b8da58976ff33
    12ae50b187c1433c0f028edcc4c2838b 6a9bfc226ca4b4530e7a4ccee1bfa2a3
    d396ae5a3fb512384b2fdd851f784a65 e03f2c4fbe11a53c7777c023462239dd
    6f7521a3f6c7d5dd3ec9b3f233773d4b 46d23cc375eb198c63301c21801f6520
    bcfb7966fc49b393f0061d974a2706df 8c4a9449f11d7f3d2dcbb90c6b877045
    636e7c0c0fe4eb0f697545460c806910 d2c355f1d253bc9d2452aaa549e27a1f
    ac7cf4ed77f322e8fa894b6a83810a34 b361901751a6f5eb65a0326e07de7c12
    16ccce2d0193f958bb3850a833f7ae43 2b65bc5a53975c155aa4bcb4f7b2c4e5
    4df16efaf6ddea94e2c50b4cd1dfe060 17e0e9d02900cffe1935e0491d77ffb4
    fdf85290fdd893d577b1131a610ef6a5 c32b2ee0293617a37cbb08b847741c3b
    8017c25ca9052ca1079d8b78aebd4787 6d330a30f6a8c6d61dd1ab5589329de7
    14d19d61370f8149748c72f132f0fc99 f34d766c6938597040d8f9e2bb522ff9
    9c63a344d6a2ae8aa8e51b7b90a4a806 105fcbca31506c446151adfeceb51b91
    abfe43960977c87471cf9ad4074d30e1 0d6a7f03c63bd5d4317f68ff325ba3bd
    80bf4dc8b52a0ba031758022eb025cdd 770b44d6d6cf0670f4e990b22347a7db
    848265e3e5eb72dfe8299ad7481a4083 22cac55786e52f633b2fb6b614eaed18
    d703dd84045a274ae8bfa73379661388 d6991fe39b0d93debb41700b41f90a15
    c4d526250235ddcd6776fc77bc97e7a4 17ebcb31600d01e57f32162a8560cacc
    7e27a096d37a1a86952ec71bd89a3e9a 30a2a26162984d7740f81193e8238e61
    f6b5b984d4d3dfa033c1bb7e4f0037fe bf406d91c0dccf32acf423cfa1e70710
    10d3f270121b493ce85054ef58bada42 310138fe081adb04e2bd901f2f13458b
    3d6758158197107c14ebb193230cd115 7380aa79cae1374a7c1e5bbcb80ee23e
    06ebfde206bfb0fcbc0edc4ebec30966 1bdd908d532eb0c6adc38b7ca7331dce
    8dfce39ab71e7c32d318d136b6100671 a1ae6a6600e3899f31f0eed19e3417d1
    34b90c9058f8632c798d4490da498730 7cba922d61c39805d072b589bd52fdf1
    e86215c2d54e6670e07383a27bbffb5a ddf47d66aa85a0c6f9f32e59d85a44dd
    5d3b22dc2be80919b490437ae4f36a0a e55edf1d0b5cb4e9a3ecabee93dfc6e3
    8d209d0fa6536d27a5d6fbb17641cde2 7525d61093f1b28072d111b2b4ae5f89
    d5974ee12e5cf7d5da4d6a31123041f3 3e61407e76cffcdcfd7e19ba58cf4b53
    6f4c4938ae79324dc402894b44faf8af bab35282ab659d13c93f70412e85cb19
    9a37ddec600545473cfb5a05e08d0b20 9973b2172b4d21fb69745a262ccde96b
    a18b2faa745b6fe189cf772a9f84cbfc
";
/// RFC 9369 Appendix A: server packet.
const V2_SERVER_PACKET: &str = "
    dc6b3343cf0008f067a5502a4262b500 4075d92faaf16f05d8a4398c47089698
    baeea26b91eb761d9b89237bbf872630 17915358230035f7fd3945d88965cf17
    f9af6e16886c61bfc703106fbaf3cb4c fa52382dd16a393e42757507698075b2
    c984c707f0a0812d8cd5a6881eaf21ce da98f4bd23f6fe1a3e2c43edd9ce7ca8
    4bed8521e2e140
";
/// RFC 9369 Appendix A: retry.
const V2_RETRY: &str = "
    cf6b3343cf0008f067a5502a4262b574 6f6b656ec8646ce8bfe33952d9555436
    65dcc7b6
";
const EXTRA_CLIENT: &str = "
    c00000000108001122334455667703aabbcc03746f6b406c0dd52b1baf79e718
    2da9723e24e89774076301eecbbcbecc2fe41651cb9fcc2a419404eda11a3405
    1d0319e018caf2b74ce97107f1b196e774a22a6e21bacfd154f23c1b1fcb91d3
    1c3afb385d88842f6a8199d4aa0fa05e1dbcbb66fac41324c21a275f525c2cb5
    f2a39a6c
";
const EXTRA_SERVER_V2: &str = "
    de6b3343cf03aabbcc04ddeeff000035d5063aaa4f6b6c5a34adf5d0a25f344e
    3d5b91e25de676a4884e5b76131d8ac43af2fa41406f9910dbcf47aa306e6d6b
    865a79336d
";
const STREAM_IN_INITIAL: &str = "
    c400000001080011223344556677000037bd5800b2f5d6fd997b3a7af01c9c8a
    9e1e35d0e4e6e6edc1ed5120ef166350b5a110571a46af0cdc44cefe1c28412d
    c378e06400cbc71d
";
const RESERVED_BITS: &str = "
    ca000000010800112233445566770000294971f68faee79ceb1c0b440794df0c
    f5960854e1ba127e6e1e1a91ce80db0a59427db67ff465f53e67
";

/// The ClientHello in the RFC's CRYPTO frame: the frame less its type, offset (0) and
/// 2-byte length (0x40f1 = 241).
fn rfc_client_hello() -> Vec<u8> {
    let frame = hex(V1_CLIENT_CRYPTO_FRAME);
    assert_eq!(frame[..4], [0x06, 0x00, 0x40, 0xf1]);
    frame[4..].to_vec()
}

/// The ServerHello in the RFC's server payload: past the ACK frame (5 bytes) and the CRYPTO
/// frame's type, offset (0) and 2-byte length (0x405a = 90).
fn rfc_server_hello() -> Vec<u8> {
    let payload = hex(V1_SERVER_PAYLOAD);
    assert_eq!(payload[..9], [0x02, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x40, 0x5a]);
    payload[9..].to_vec()
}

/// Every packet the tests have, with whose keys open it and the key material.
fn vectors() -> Vec<(&'static str, Vec<u8>, bool, &'static [u8])> {
    vec![
        ("v1 client", hex(V1_CLIENT_PACKET), true, &DCID),
        ("v1 server", hex(V1_SERVER_PACKET), false, &DCID),
        ("v2 client", hex(V2_CLIENT_PACKET), true, &DCID),
        ("v2 server", hex(V2_SERVER_PACKET), false, &DCID),
        ("extra client", hex(EXTRA_CLIENT), true, &GEN_DCID),
        ("extra server v2", hex(EXTRA_SERVER_V2), false, &GEN_DCID),
    ]
}

fn check_keys(version: Version, client: bool, secret: &str, key: &str, iv: &str, hp: &str) {
    let s = side_secret(version, &DCID, client).expect("secret");
    assert_eq!(s.to_vec(), hex(secret), "{version:?} client={client} secret");
    let k = keys_from_secret(version, &s).expect("keys");
    assert_eq!(k.key.to_vec(), hex(key), "{version:?} client={client} key");
    assert_eq!(k.iv.to_vec(), hex(iv), "{version:?} client={client} iv");
    assert_eq!(k.hp.to_vec(), hex(hp), "{version:?} client={client} hp");
    assert_eq!(initial_keys(version, &DCID, client), Some(k));
}

#[test]
fn rfc9001_a1_keys() {
    check_keys(
        Version::V1,
        true,
        "c00cf151ca5be075ed0ebfb5c80323c4 2d6b7db67881289af4008f1f6c357aea",
        "1f369613dd76d5467730efcbe3b1a22d",
        "fa044b2f42a3fd3b46fb255c",
        "9f50449e04a0e810283a1e9933adedd2",
    );
    check_keys(
        Version::V1,
        false,
        "3c199828fd139efd216c155ad844cc81 fb82fa8d7446fa7d78be803acdda951b",
        "cf3a5331653c364c88f0f379b6067e37",
        "0ac1493ca1905853b0bba03e",
        "c206b8d9b9f0f37644430b490eeaa314",
    );
}

#[test]
fn rfc9369_a1_keys() {
    check_keys(
        Version::V2,
        true,
        "14ec9d6eb9fd7af83bf5a668bc17a7e2 83766aade7ecd0891f70f9ff7f4bf47b",
        "8b1a0bc121284290a29e0971b5cd045d",
        "91f73e2351d8fa91660e909f",
        "45b95e15235d6f45a6b19cbcb0294ba9",
    );
    check_keys(
        Version::V2,
        false,
        "0263db1782731bf4588e7e4d93b74639 07cb8cd8200b5da55a8bd488eafc37c1",
        "82db637861d55e1d011f19ea71d5d2a7",
        "dd13c276499c0249d3310652",
        "edf6d05c83121201b436e16877593c3a",
    );
}

#[test]
fn versions() {
    assert_eq!(Version::from_wire(1), Some(Version::V1));
    assert_eq!(Version::from_wire(0x6b3343cf), Some(Version::V2));
    for other in [0, 2, 0xff00_001d, 0x0a0a_0a0a, 0x709a_50c4] {
        assert_eq!(Version::from_wire(other), None, "{other:#x}");
    }
    assert_eq!(Version::V1.label(), "quic1");
    assert_eq!(Version::V2.label(), "quic2");
}

fn check_client_initial(packet: &[u8], version: Version) {
    let h = header(packet).expect("header");
    assert_eq!(h.kind, LongType::Initial);
    assert_eq!(Version::from_wire(h.version), Some(version));
    assert_eq!(h.dcid, DCID);
    assert!(h.scid.is_empty());
    assert_eq!((h.token_len, h.pn_offset, h.packet_len), (0, 18, 1200));
    assert_eq!(packet.len(), 1200);

    let i = open_initial(packet, true, &DCID).expect("opens");
    assert_eq!(i.version, version);
    assert_eq!(i.dcid, DCID);
    assert!(i.scid.is_empty());
    assert_eq!(i.packet_number, 2);
    assert_eq!(i.crypto, vec![(0, rfc_client_hello())]);
    assert_eq!(i.crypto[0].1[..6], [0x01, 0x00, 0x00, 0xed, 0x03, 0x03]);
    assert_eq!(i.close, None);
}

fn check_server_initial(packet: &[u8], version: Version) {
    let h = header(packet).expect("header");
    assert_eq!(h.kind, LongType::Initial);
    assert!(h.dcid.is_empty());
    assert_eq!(h.scid, SERVER_SCID);
    assert_eq!((h.token_len, h.pn_offset, h.packet_len), (0, 18, 135));
    assert_eq!(packet.len(), 135);

    let i = open_initial(packet, false, &DCID).expect("opens");
    assert_eq!(i.version, version);
    assert!(i.dcid.is_empty());
    assert_eq!(i.scid, SERVER_SCID);
    assert_eq!(i.packet_number, 1);
    // ACK skipped, the ServerHello in one CRYPTO frame
    assert_eq!(i.crypto, vec![(0, rfc_server_hello())]);
    assert_eq!(i.crypto[0].1[..4], [0x02, 0x00, 0x00, 0x56]);
    assert_eq!(i.close, None);

    // what the crate's TLS parser reads from it
    let p = tls::parse(&as_records(&i.crypto[0].1), &[], false);
    assert!(p.hello);
    assert_eq!(
        (p.version, p.cipher, p.group.map(|g| g.label())),
        (0x0304, 0x1301, Some("x25519"))
    );
    assert!(!p.resumed);
}

#[test]
fn rfc9001_a2_client_initial() {
    check_client_initial(&hex(V1_CLIENT_PACKET), Version::V1);
}

#[test]
fn rfc9001_a3_server_initial() {
    check_server_initial(&hex(V1_SERVER_PACKET), Version::V1);
}

#[test]
fn rfc9369_a2_client_initial() {
    check_client_initial(&hex(V2_CLIENT_PACKET), Version::V2);
}

#[test]
fn rfc9369_a3_server_initial() {
    check_server_initial(&hex(V2_SERVER_PACKET), Version::V2);
}

#[test]
fn wrong_keys_do_not_open() {
    let client = hex(V1_CLIENT_PACKET);
    assert_eq!(open_initial(&client, false, &DCID), Err(QuicError::Decrypt));
    assert_eq!(open_initial(&client, true, &GEN_DCID), Err(QuicError::Decrypt));
    assert_eq!(open_initial(&client, true, &DCID[..7]), Err(QuicError::Decrypt));
    let server = hex(V2_SERVER_PACKET);
    assert_eq!(open_initial(&server, true, &DCID), Err(QuicError::Decrypt));
    // v1's keys on a v2 packet: the same bytes with v1's Version field
    let mut as_v1 = hex(V2_CLIENT_PACKET);
    as_v1[1..5].copy_from_slice(&[0, 0, 0, 1]);
    as_v1[0] = 0xc0 | (as_v1[0] & 0x0f);
    assert_eq!(open_initial(&as_v1, true, &DCID), Err(QuicError::Decrypt));
}

/// RFC 9001 A.4 / RFC 9369 A.4: Retry packets are parsed (type bits differ between the
/// versions) and never opened.
#[test]
fn retry_is_parsed_not_opened() {
    for (retry, version) in [(hex(V1_RETRY), 1), (hex(V2_RETRY), 0x6b3343cf)] {
        let h = header(&retry).expect("header");
        assert_eq!(h.kind, LongType::Retry);
        assert_eq!(h.version, version);
        assert!(h.dcid.is_empty());
        assert_eq!(h.scid, SERVER_SCID);
        assert_eq!(&retry[h.pn_offset..h.pn_offset + h.token_len], b"token");
        assert_eq!(h.packet_len, retry.len());
        assert_eq!(open_initial(&retry, true, &DCID), Err(QuicError::NotLong));
        assert_eq!(open_initial(&retry, false, &DCID), Err(QuicError::NotLong));
    }
}

/// The Initial packets' type bits turned into 0-RTT's and Handshake's: the headers read
/// as those, and nothing but an Initial is decrypted.
#[test]
fn only_initial_packets_are_opened() {
    for (packet, bits) in [
        (
            hex(V1_CLIENT_PACKET),
            [(0x1, LongType::ZeroRtt), (0x2, LongType::Handshake)],
        ),
        (
            hex(V2_CLIENT_PACKET),
            [(0x2, LongType::ZeroRtt), (0x3, LongType::Handshake)],
        ),
    ] {
        for (b, kind) in bits {
            let mut p = packet.clone();
            p[0] = (p[0] & 0xcf) | b << 4;
            let h = header(&p).expect("header");
            assert_eq!(h.kind, kind);
            // no token field: the Initial's token length (0) is read as the Length
            assert_eq!((h.token_len, h.pn_offset, h.packet_len), (0, 16, 16));
            assert_eq!(open_initial(&p, true, &DCID), Err(QuicError::NotLong));
        }
    }
}

#[test]
fn header_errors() {
    assert_eq!(header(&[]), Err(QuicError::Short));
    assert_eq!(header(&[0xc0, 0, 0, 0]), Err(QuicError::Short));
    // short headers (fixed bit set or not)
    assert_eq!(header(&[0x40, 1, 2, 3, 4, 5, 6, 7]), Err(QuicError::NotLong));
    assert_eq!(header(&[0x00; 30]), Err(QuicError::NotLong));
    // Version Negotiation, a draft, a reserved version
    for v in [[0, 0, 0, 0], [0xff, 0, 0, 0x1d], [0x1a, 0x2a, 0x3a, 0x4a]] {
        let mut p = vec![0xc0];
        p.extend_from_slice(&v);
        p.extend_from_slice(&[0; 30]);
        assert_eq!(header(&p), Err(QuicError::UnknownVersion), "{v:?}");
    }
    // a 21-byte DCID
    let mut p = vec![0xc0, 0, 0, 0, 1, 21];
    p.extend_from_slice(&[7; 60]);
    assert_eq!(header(&p), Err(QuicError::Truncated));
    // a 20-byte one is fine
    p[5] = 20;
    let h = header(&p).expect("20-byte DCID");
    assert_eq!(h.dcid, [7; 20]);
    // every prefix of a real header is cut somewhere
    let full = hex(V1_SERVER_PACKET);
    for n in 6..full.len() {
        assert_eq!(header(&full[..n]), Err(QuicError::Truncated), "{n} bytes");
    }
    // a token longer than the rest
    let mut p = vec![0xc0, 0, 0, 0, 1, 0, 0, 0x44, 0x00];
    p.extend_from_slice(&[0; 100]);
    assert_eq!(header(&p), Err(QuicError::Truncated));
    // a Length past the end
    let mut p = vec![0xc0, 0, 0, 0, 1, 0, 0, 0, 0x40, 0x30];
    p.extend_from_slice(&[0; 0x2f]);
    assert_eq!(header(&p), Err(QuicError::Truncated));
    p.push(0);
    assert_eq!(header(&p).map(|h| h.packet_len), Ok(10 + 0x30));
    // a Retry too short for its integrity tag
    assert_eq!(header(&hex(V1_RETRY)[..30]), Err(QuicError::Truncated));
}

#[test]
fn too_short_to_open() {
    // an Initial whose Length leaves no room for the header-protection sample
    let mut p = vec![0xc0, 0, 0, 0, 1, 8];
    p.extend_from_slice(&DCID);
    p.extend_from_slice(&[0, 0, 19]);
    p.extend_from_slice(&[0x55; 19]);
    assert_eq!(header(&p).map(|h| h.packet_len), Ok(p.len()));
    assert_eq!(open_initial(&p, true, &DCID), Err(QuicError::Short));
    p[16] = 20;
    p.push(0x55);
    assert_eq!(open_initial(&p, true, &DCID), Err(QuicError::Decrypt));
}

/// The generated v1 client packet: frames out of order, an ACK with ranges and ECN counts,
/// a CONNECTION_CLOSE whose reason is not kept, a token.
#[test]
fn frames_of_every_allowed_type() {
    let p = hex(EXTRA_CLIENT);
    let h = header(&p).expect("header");
    assert_eq!(h.token_len, 3);
    assert_eq!(h.scid, [0xaa, 0xbb, 0xcc]);
    let i = open_initial(&p, true, &GEN_DCID).expect("opens");
    assert_eq!(i.version, Version::V1);
    assert_eq!(i.dcid, GEN_DCID);
    assert_eq!(i.scid, [0xaa, 0xbb, 0xcc]);
    assert_eq!(i.packet_number, 0x1f);
    assert_eq!(i.crypto, vec![(5, b"world".to_vec()), (0, b"hello".to_vec())]);
    assert_eq!(i.close, Some(0x0a));
    assert!(!format!("{i:?}").contains("secret"), "the reason phrase is not kept");
    let mut s = CryptoStream::default();
    for (o, d) in &i.crypto {
        s.add(*o, d);
    }
    assert_eq!(s.contiguous(), b"helloworld");

    // the generated v2 server packet: CONNECTION_CLOSE 0x1d, a 3-byte packet number
    let i = open_initial(&hex(EXTRA_SERVER_V2), false, &GEN_DCID).expect("opens");
    assert_eq!(i.version, Version::V2);
    assert_eq!(i.dcid, [0xaa, 0xbb, 0xcc]);
    assert_eq!(i.scid, [0xdd, 0xee, 0xff, 0x00]);
    assert_eq!(i.packet_number, 0x0102);
    assert_eq!(i.crypto, vec![(300, b"abcd".to_vec())]);
    assert_eq!(i.close, Some(0x12345));
}

#[test]
fn protocol_violations() {
    // a STREAM frame in an Initial packet
    assert_eq!(
        open_initial(&hex(STREAM_IN_INITIAL), true, &GEN_DCID),
        Err(QuicError::BadFrame)
    );
    // a reserved header bit set (the packet is authentic)
    assert_eq!(
        open_initial(&hex(RESERVED_BITS), true, &GEN_DCID),
        Err(QuicError::BadFrame)
    );
}

#[test]
fn frame_walker() {
    let bad = Err(QuicError::BadFrame);
    assert_eq!(frames(&[]), bad);
    assert_eq!(frames(&[0, 0, 1]), Ok((vec![], None)));
    // ACK: without and with ECN counts, 2-, 4- and 8-byte varints
    let ack = [0x02, 0x80, 0, 0x10, 0, 0x41, 0, 1, 0, 0xc0, 0, 0, 0, 0, 0, 0, 5, 3];
    assert_eq!(frames(&ack), Ok((vec![], None)));
    assert_eq!(frames(&ack[..ack.len() - 1]), bad);
    let mut ecn = ack.to_vec();
    ecn[0] = 0x03;
    assert_eq!(frames(&ecn), bad, "ECN counts missing");
    ecn.extend_from_slice(&[1, 0x40, 2, 3]);
    assert_eq!(frames(&ecn), Ok((vec![], None)));
    // an ACK range count far past the payload
    assert_eq!(frames(&[0x02, 0, 0, 0xbf, 0xff, 0xff, 0xff, 0]), bad);
    // CRYPTO: contiguous frames joined, empty ones left out, a length past the end
    let c = [6, 0, 2, b'a', b'b', 6, 2, 1, b'c', 6, 9, 0, 6, 0, 1, b'z'];
    assert_eq!(frames(&c), Ok((vec![(0, b"abc".to_vec()), (0, b"z".to_vec())], None)));
    assert_eq!(frames(&[6, 0, 5, 1, 2]), bad);
    // an offset plus length over 2^62 - 1
    let over = [6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 0];
    assert_eq!(frames(&over), bad);
    let at_max = [6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 1, 0];
    assert_eq!(frames(&at_max), Ok((vec![((1 << 62) - 2, vec![0])], None)));
    // CONNECTION_CLOSE: the first one's code
    let close = [0x1c, 0x01, 0x06, 2, b'h', b'i', 0x1d, 0x02, 0];
    assert_eq!(frames(&close), Ok((vec![], Some(1))));
    assert_eq!(frames(&close[..5]), bad);
    // frame types not allowed in Initial packets, and a non-minimal encoding of CRYPTO
    for t in [0x04, 0x05, 0x07, 0x08, 0x0f, 0x10, 0x18, 0x1e, 0x1f, 0x30, 0x40, 0xff] {
        assert_eq!(frames(&[t, 0, 0, 0, 0]), bad, "{t:#x}");
    }
    assert_eq!(frames(&[0x40, 0x06, 0, 1, b'a']), bad);
    // at most MAX_CRYPTO_FRAMES separate frames
    let mut many = Vec::new();
    for i in 0..MAX_CRYPTO_FRAMES as u8 {
        many.extend_from_slice(&[6, 0x40, 2 * i, 1, i]);
    }
    let (c, _) = frames(&many).expect("64 frames");
    assert_eq!(c.len(), MAX_CRYPTO_FRAMES);
    many.extend_from_slice(&[6, 0x40, 0xff, 1, 0]);
    assert_eq!(frames(&many), bad);
}

/// Small xorshift generator: the same "random" bytes every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every function on an input: must not panic, and must stay bounded.
fn exercise(bytes: &[u8], dcid: &[u8]) {
    let _ = header(bytes);
    let ps = packets(bytes);
    assert!(ps.len() <= MAX_PACKETS);
    for p in &ps {
        if let Packet::Long(h, r) = p {
            assert!(r.end <= bytes.len() && r.start < r.end);
            assert_eq!(r.len(), h.packet_len);
        }
    }
    for i in [open_initial(bytes, true, dcid), open_initial(bytes, false, dcid)]
        .iter()
        .flatten()
    {
        let kept: usize = i.crypto.iter().map(|(_, d)| d.len()).sum();
        assert!(kept <= bytes.len());
        assert!(i.crypto.len() <= MAX_CRYPTO_FRAMES);
    }
}

/// Every vector cut short, every byte of it flipped three ways: never a panic, never a
/// packet opened; a changed byte past the packet number field's start (packet number,
/// ciphertext, tag) fails decryption.
#[test]
fn truncated_and_flipped_never_open() {
    for (name, packet, client, dcid) in vectors() {
        let opened = open_initial(&packet, client, dcid);
        assert!(opened.is_ok(), "{name}: {opened:?}");
        let pn_offset = header(&packet).expect("header").pn_offset;
        for n in 0..packet.len() {
            let cut = &packet[..n];
            exercise(cut, dcid);
            assert!(open_initial(cut, client, dcid).is_err(), "{name}: {n} bytes opened");
        }
        for at in 0..packet.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut p = packet.clone();
                p[at] ^= flip;
                exercise(&p, dcid);
                let r = open_initial(&p, client, dcid);
                if at >= pn_offset {
                    assert_eq!(r, Err(QuicError::Decrypt), "{name}: byte {at} ^ {flip:#x}");
                } else {
                    assert!(r.is_err(), "{name}: byte {at} ^ {flip:#x} opened");
                }
            }
        }
    }
}

/// Random bytes, and random bytes behind plausible long headers: never a panic.
#[test]
fn garbage_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let versions: [[u8; 4]; 3] = [[0, 0, 0, 1], [0x6b, 0x33, 0x43, 0xcf], [0, 0, 0, 0]];
    for round in 0..20_000 {
        let len = rng.below(1400);
        let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if round % 2 == 0 && len > 8 {
            b[0] |= 0x80;
            b[1..5].copy_from_slice(&versions[rng.below(3)]);
            b[5] = rng.below(22) as u8;
        }
        exercise(&b, &DCID);
        // and the frame walker on the same bytes as if decrypted
        if let Ok((c, _)) = frames(&b) {
            assert!(c.iter().map(|(_, d)| d.len()).sum::<usize>() <= b.len());
            assert!(c.len() <= MAX_CRYPTO_FRAMES);
        }
        let mut s = CryptoStream::new(64);
        for chunk in b.chunks(9) {
            s.add(u64::from(chunk[0]) << (chunk.len() % 8 * 8), chunk);
        }
        assert!(s.contiguous().len() <= 64);
    }
}

/// A hand-built Handshake packet: its type bits, the server's connection IDs, a 2-byte
/// Length and `payload` bytes of (never read) ciphertext.
fn handshake_packet(v2: bool, payload: usize) -> Vec<u8> {
    let mut p = if v2 {
        vec![0xf1, 0x6b, 0x33, 0x43, 0xcf]
    } else {
        vec![0xe1, 0, 0, 0, 1]
    };
    p.push(0);
    p.push(8);
    p.extend_from_slice(&SERVER_SCID);
    p.extend_from_slice(&(0x4000 | payload as u16).to_be_bytes());
    p.extend(std::iter::repeat_n(0x5a, payload));
    p
}

#[test]
fn coalesced_packets() {
    for (initial, v2) in [(hex(V1_SERVER_PACKET), false), (hex(V2_SERVER_PACKET), true)] {
        let hs = handshake_packet(v2, 300);
        let short = [
            0x43, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
        ];
        let mut d = initial.clone();
        d.extend_from_slice(&hs);
        d.extend_from_slice(&short);
        let ps = packets(&d);
        assert_eq!(ps.len(), 3, "{ps:?}");
        let a = initial.len();
        let b = a + hs.len();
        match &ps[0] {
            Packet::Long(h, r) => {
                assert_eq!((h.kind, r.clone()), (LongType::Initial, 0..a));
                let i = open_initial(&d[r.clone()], false, &DCID).expect("opens");
                assert_eq!(i.crypto, vec![(0, rfc_server_hello())]);
            }
            p => panic!("{p:?}"),
        }
        match &ps[1] {
            Packet::Long(h, r) => {
                assert_eq!((h.kind, r.clone()), (LongType::Handshake, a..b));
                assert_eq!(
                    (h.dcid.len(), &h.scid[..], h.pn_offset, h.token_len),
                    (0, &SERVER_SCID[..], 17, 0)
                );
                // never opened
                assert_eq!(open_initial(&d[r.clone()], false, &DCID), Err(QuicError::NotLong));
            }
            p => panic!("{p:?}"),
        }
        assert_eq!(ps[2], Packet::Short(b));
        // the whole datagram given to open_initial: its first packet is opened
        assert!(open_initial(&d, false, &DCID).is_ok());

        // zero padding after the packets is not a packet
        let mut padded = initial.clone();
        padded.extend_from_slice(&hs);
        padded.extend_from_slice(&[0; 500]);
        assert_eq!(packets(&padded).len(), 2);
        // a cut second packet ends the walk after the first
        let cut = &d[..a + 100];
        assert_eq!(packets(cut).len(), 1);
        // an unknown version ends it too
        let mut unknown = initial.clone();
        unknown.extend_from_slice(&[0xc0, 0xff, 0, 0, 0x1d, 0, 0, 0, 0]);
        assert_eq!(packets(&unknown).len(), 1);
    }
    // a short header first: nothing else is read
    assert_eq!(packets(&[0x41, 0, 0, 0]), vec![Packet::Short(0)]);
    assert_eq!(packets(&[]), vec![]);
    // at most MAX_PACKETS
    let many: Vec<u8> = (0..12).flat_map(|_| handshake_packet(false, 20)).collect();
    let ps = packets(&many);
    assert_eq!(ps.len(), MAX_PACKETS);
    assert!(ps
        .iter()
        .all(|p| matches!(p, Packet::Long(h, _) if h.kind == LongType::Handshake)));
    // a Retry takes the rest of the datagram
    let mut retry = hex(V1_RETRY);
    let rlen = retry.len();
    assert_eq!(
        packets(&retry),
        vec![Packet::Long(header(&retry).expect("retry"), 0..rlen)]
    );
    retry.extend_from_slice(&handshake_packet(false, 20));
    assert_eq!(packets(&retry).len(), 1);
}

#[test]
fn crypto_stream() {
    // out of order and overlapping
    let mut s = CryptoStream::default();
    s.add(6, b"world");
    assert_eq!(s.contiguous(), b"");
    s.add(2, b"llo w");
    s.add(0, b"hel");
    assert_eq!(s.contiguous(), b"hello world");
    // an overlap that disagrees: the first bytes stay
    s.add(0, b"HELLO WORLD!");
    assert_eq!(s.contiguous(), b"hello world!");
    // a gap ends it until filled
    s.add(20, b"tail");
    s.add(15, b"abc");
    assert_eq!(s.contiguous(), b"hello world!");
    s.add(12, b"123");
    assert_eq!(s.contiguous(), b"hello world!123abc");
    s.add(18, b"xy");
    assert_eq!(s.contiguous(), b"hello world!123abcxytail");
    // nothing kept past max, no matter the offset
    let mut s = CryptoStream::new(8);
    s.add(u64::MAX, b"x");
    s.add(6, b"ghijkl");
    s.add(0, b"abcdef");
    assert_eq!(s.contiguous(), b"abcdefgh");
    s.add(8, b"more");
    assert_eq!(s.contiguous(), b"abcdefgh");
    // waiting frames are bounded: the 65th is dropped, the gap stays
    let mut s = CryptoStream::new(1000);
    for i in 0..70u64 {
        s.add(2 + 2 * i, &[b'a'; 2]);
    }
    s.add(0, b"..");
    assert_eq!(s.contiguous().len(), 2 + 2 * 64);
}

/// The RFC's ClientHello split into CRYPTO frames sent out of order (as Chrome does), put
/// together, and read by the crate's ClientHello parser.
#[test]
fn client_hello_through_records() {
    let ch = rfc_client_hello();
    let mut s = CryptoStream::default();
    s.add(100, &ch[100..]);
    s.add(40, &ch[40..120]);
    s.add(0, &ch[..50]);
    assert_eq!(s.contiguous(), &ch[..]);
    let offer = parse_client_hello(&as_records(s.contiguous())).expect("ClientHello");
    assert_eq!(
        offer,
        Offer {
            max_version: 0x0304,
            suites: vec![0x1301, 0x1302],
            groups: vec![0x001d, 0x0017, 0x0018],
            key_shares: vec![0x001d],
            sigalgs: vec![0x0403, 0x0503, 0x0603, 0x0203, 0x0804, 0x0805, 0x0806],
            alpn: ALPN_OTHER,
            sni: Some("example.com".to_string()),
            resumption: Resumption::None,
            early_data: false,
        }
    );
    // the same from the packet itself
    let i = open_initial(&hex(V2_CLIENT_PACKET), true, &DCID).expect("opens");
    let offer2 = parse_client_hello(&as_records(&i.crypto[0].1)).expect("ClientHello");
    assert_eq!(offer2, offer);
}

#[test]
fn records() {
    assert_eq!(as_records(&[]), Vec::<u8>::new());
    assert_eq!(as_records(&[1, 2, 3]), [22, 3, 3, 0, 3, 1, 2, 3]);
    let big: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
    let r = as_records(&big);
    assert_eq!(r.len(), big.len() + 3 * 5);
    let mut at = 0;
    let mut joined = Vec::new();
    for want in [16384, 16384, 40_000 - 2 * 16384] {
        assert_eq!(r[at..at + 3], [22, 3, 3]);
        let len = usize::from(u16::from_be_bytes([r[at + 3], r[at + 4]]));
        assert_eq!(len, want);
        joined.extend_from_slice(&r[at + 5..at + 5 + len]);
        at += 5 + len;
    }
    assert_eq!(at, r.len());
    assert_eq!(joined, big);
}
