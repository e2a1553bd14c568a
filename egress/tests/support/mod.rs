//! The egress lab, shared by the suites and by the proxy benchmark (benches/proxy.rs).

// Raw HTTP/1.1 proxy requests, sent as bytes so no client normalises them first.
pub mod client;
// The lab's DNS server, answering from a zone the test edits.
pub mod dns;
// The lab: namespaces, DNS, origins, a project with rules, and the two filters in `filter`.
pub mod lab;
// The origin servers, recording which requests reached them.
pub mod origin;
// The `world` and `filter` namespaces joined by a veth on documentation addresses.
pub mod topology;
