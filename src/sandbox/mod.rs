//! The jail of one run. This layer is the only one that makes namespace, mount and
//! credential syscalls. One file per isolation step; [`helper`] runs them in order.

pub mod agent_side;
pub mod command_cgroup;
pub mod command_side;
pub mod command_userns;
pub mod disk;
pub mod env;
pub mod error;
pub mod fdpass;
pub mod fds;
pub mod helper;
pub mod home_state;
pub mod host_mounts;
pub mod identity;
pub mod image_root;
pub mod init;
pub mod landlock;
pub mod limits;
pub mod listen_notify;
pub mod namespaces;
pub mod noexec_view;
pub mod priority;
pub mod pty;
pub mod rootfs;
pub mod runner;
pub mod seccomp;
pub mod seccomp_table;
pub mod setup_marks;
pub mod sides;
pub mod spec;
pub mod status;
pub mod watch;

pub use error::SandboxError;
pub use spec::RunSpec;
