//! Why a jail could not be built. Every variant names the isolation step, so the operator
//! learns which protection the kernel or host could not give; a run never starts without it.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum SandboxError {
    /// The kernel cannot give an isolation the run needs (fail closed).
    #[error("{step}: the kernel cannot provide this isolation: {why}")]
    Unsupported { step: &'static str, why: String },
    /// A syscall failed while building the jail.
    #[error("{step}: {source}")]
    Sys {
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The run spec asks for something that cannot be done as asked.
    #[error("{step}: {why}")]
    Invalid { step: &'static str, why: String },
}

impl SandboxError {
    pub fn sys(step: &'static str, source: impl Into<std::io::Error>) -> Self {
        SandboxError::Sys {
            step,
            source: source.into(),
        }
    }

    pub fn errno(step: &'static str, e: nix::errno::Errno) -> Self {
        SandboxError::Sys {
            step,
            source: std::io::Error::from_raw_os_error(e as i32),
        }
    }
}
