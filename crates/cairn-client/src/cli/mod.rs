//! `cairn` as a client: sessions, plans, todos, `watch` (with a live board
//! for session trees) and `wait`, over gRPC. `--output json` everywhere for
//! scripts; the task box of docs/rules.md (Rendering) for people.
//!
//! - [`args`]: the command-line arguments of each subcommand;
//! - [`commands`]: the one-shot commands;
//! - [`board`]: `cairn watch`, as event lines or a live tree board;
//! - [`inbox`]: `cairn inbox`, printed once or a live list decided on by
//!   number;
//! - [`principals`]: principals and their tokens;
//! - [`io`]: reading input, printing (escaped) output;
//! - [`render`]: terminal rendering, pure.

mod admin;
mod args;
mod board;
mod commands;
mod inbox;
mod io;
mod principals;
pub mod render;

pub use admin::admin;
pub use args::{
    AdminCmd, ClientArgs, InboxArgs, Output, PlanCmd, PrincipalCmd, SessionCmd, TodoCmd, WaitArgs,
    WatchArgs,
};
pub use board::watch;
pub use commands::{plan, session, todo, wait};
pub use inbox::inbox;
pub use io::CliResult;
pub use principals::principal;
