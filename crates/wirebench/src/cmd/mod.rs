pub mod lab;
