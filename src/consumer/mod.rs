pub mod batch;
pub mod config;
