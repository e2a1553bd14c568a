#![allow(dead_code)]
pub mod client;
pub mod dns;
pub mod lab;
pub mod netns;
pub mod origin;
