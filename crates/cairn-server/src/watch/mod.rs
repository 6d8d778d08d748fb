//! Following the store: the watch stream ([`stream`]) and `Wait`
//! ([`wait`]), both built on the store's hub and log.

pub mod scope;
pub mod stream;
pub mod wait;

pub use scope::{Scope, scoped};
pub use stream::{Delivered, Item, Start, check_start, watch};
pub use wait::{Condition, Lost, WaitOutcome, WaitTarget, wait};
