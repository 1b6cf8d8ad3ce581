//! What wirebench asks of the operating system beyond the standard library, in one place
//! every other crate uses: files written whole or not at all (`output`).
#![deny(unsafe_code)]

pub mod output;
