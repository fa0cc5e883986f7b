//! The wire layer against fake peers on 127.0.0.1 and hostile bytes: framing, read deadlines,
//! and what hostile input may cost in memory.
//!
//! Modules:
//! * [`deadlines`]: Read deadlines are deadlines.
//! * [`framing`]: Bad frames from a peer cost only what the peer sent.
//! * [`hostile`]: A hostile broker's bytes, handed to the decoder without a broker.
//! * [`memory_bounds`]: Decoding one hostile Fetch response costs at most a small constant times
//!   its decode budget, for every codec the build enables.
//! * [`record_bounds`]: Hostile record data costs only what it weighs.

mod deadlines;
mod framing;
mod hostile;
mod memory_bounds;
mod record_bounds;
