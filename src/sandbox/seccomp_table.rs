//! Which syscalls the jail's seccomp filter refuses, grouped by why. Numbers come from libc
//! for the architecture being built; calls an architecture lacks are compiled out there.
//!
//! The filter is a deny list on top of the other layers (uid, namespaces, mounts, Landlock,
//! capabilities): it removes kernel surface a run never needs and that has a history of
//! privilege escalations or escapes, following what container runtimes refuse by default.

use libc::c_long;

/// One refused syscall, named for logs and tests.
pub type Entry = (&'static str, c_long);

// Newer than the libc crate's tables; the number is the same on every architecture that
// uses the unified syscall numbering (424 and up), including x86_64 and aarch64.
const SYS_OPEN_TREE_ATTR: c_long = 467;

/// Namespaces: a new user namespace hands the run a full capability set over fresh kernel
/// objects (the most common route to kernel bugs); `setns` could join the host's.
/// `clone` is handled separately (flag check), `clone3` returns ENOSYS.
pub const NAMESPACES: &[Entry] = &[("unshare", libc::SYS_unshare), ("setns", libc::SYS_setns)];

/// Mounts: the mount layout is the jail's filesystem view; the run must not reshape it,
/// change its root, or build detached mounts with the new mount API.
pub const MOUNTS: &[Entry] = &[
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("open_tree_attr", SYS_OPEN_TREE_ATTR),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
];

/// Reaching into other processes: tracing, reading or writing their memory, advising their
/// memory, comparing or stealing their file descriptors. A run has no business with any
/// process but its own children, and these bypass Landlock's view of files.
pub const OTHER_PROCESSES: &[Entry] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("process_madvise", libc::SYS_process_madvise),
    ("kcmp", libc::SYS_kcmp),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
];

/// Large kernel attack surface with a long exploit record: io_uring (also runs I/O that
/// seccomp never sees), eBPF, perf events, and userfaultfd (used to widen kernel races).
pub const ATTACK_SURFACE: &[Entry] = &[
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
];

/// Kernel keyrings are not namespaced: keys could leak between runs or from the host.
pub const KEYRINGS: &[Entry] = &[
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
];

/// Loading code into the kernel or booting another one.
pub const KERNEL_CODE: &[Entry] = &[
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
];

/// Host-wide state a run must not change or read: accounting, swap, power, clocks,
/// host names, quotas, the kernel log, the terminal line, the NFS server and old profiling.
pub const HOST_STATE: &[Entry] = &[
    ("acct", libc::SYS_acct),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("syslog", libc::SYS_syslog),
    ("vhangup", libc::SYS_vhangup),
    ("nfsservctl", libc::SYS_nfsservctl),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
];

/// x86-only legacy: raw port I/O, loading a.out libraries, the removed sysctl(2).
/// (vm86 exists only for 32-bit x86, whose syscalls the architecture check already kills.)
#[cfg(target_arch = "x86_64")]
pub const X86_LEGACY: &[Entry] = &[
    ("iopl", libc::SYS_iopl),
    ("ioperm", libc::SYS_ioperm),
    ("uselib", libc::SYS_uselib),
    ("_sysctl", libc::SYS__sysctl),
];
#[cfg(not(target_arch = "x86_64"))]
pub const X86_LEGACY: &[Entry] = &[];

/// File handles open any inode on a filesystem by number, bypassing the path walk and so
/// the mount view and Landlock (the "shocker" container escape).
pub const FILE_HANDLES: &[Entry] = &[
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
];

/// Memory calls that act on other processes (page migration of another pid) or hide memory
/// from the kernel (memfd_secret), plus fanotify, which watches whole filesystems.
/// mbind/set_mempolicy/get_mempolicy stay allowed: they only shape the caller's own NUMA
/// placement and some runtimes call them.
pub const MEMORY_AND_WATCH: &[Entry] = &[
    ("migrate_pages", libc::SYS_migrate_pages),
    ("move_pages", libc::SYS_move_pages),
    ("memfd_secret", libc::SYS_memfd_secret),
    ("fanotify_init", libc::SYS_fanotify_init),
];

/// Refused on the agent side only: a memfd lives on the kernel's internal shmem mount,
/// which is not noexec, so the loader (part of the agent's own program) could map a memfd
/// copy of any program executable and run it; `vm.memfd_noexec` stops only execve.
/// (`memfd_secret` is refused on both sides, above.)
pub const AGENT_ONLY: &[Entry] = &[("memfd_create", libc::SYS_memfd_create)];

/// One call that may act on the caller only: the index of its pid (or `who`) argument,
/// which must be 0, and for the calls that also take a `which`, its index and the one
/// value that names a single process (a process group or a uid is many).
pub type SelfOnly = (&'static str, c_long, u8, Option<(u8, u64)>);

/// Calls that change how another process is scheduled, refused (EPERM) unless they name
/// the caller itself. A command could otherwise starve the shepherd that times it; the
/// other side's processes no call can even name. Thread-level uses (a thread's own tid
/// rather than 0) are refused too; reads (getpriority, sched_getaffinity, ioprio_get) stay
/// allowed.
pub const SELF_ONLY: &[SelfOnly] = &[
    (
        "setpriority",
        libc::SYS_setpriority,
        1,
        Some((0, libc::PRIO_PROCESS as u64)),
    ),
    ("sched_setaffinity", libc::SYS_sched_setaffinity, 0, None),
    ("sched_setscheduler", libc::SYS_sched_setscheduler, 0, None),
    ("sched_setparam", libc::SYS_sched_setparam, 0, None),
    ("sched_setattr", libc::SYS_sched_setattr, 0, None),
    // IOPRIO_WHO_PROCESS
    ("ioprio_set", libc::SYS_ioprio_set, 1, Some((0, 1))),
];

/// Every syscall refused on both sides whatever its arguments (EPERM).
pub fn unconditional() -> Vec<Entry> {
    [
        NAMESPACES,
        MOUNTS,
        OTHER_PROCESSES,
        ATTACK_SURFACE,
        KEYRINGS,
        KERNEL_CODE,
        HOST_STATE,
        X86_LEGACY,
        FILE_HANDLES,
        MEMORY_AND_WATCH,
    ]
    .concat()
}

/// `clone` flags that create namespaces; `clone` with any of them is refused (EPERM).
pub const NAMESPACE_CLONE_FLAGS: &[(&str, libc::c_int)] = &[
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER),
    ("CLONE_NEWNS", libc::CLONE_NEWNS),
    ("CLONE_NEWPID", libc::CLONE_NEWPID),
    ("CLONE_NEWNET", libc::CLONE_NEWNET),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP),
    ("CLONE_NEWTIME", libc::CLONE_NEWTIME),
];

/// ioctl requests refused on any fd: TIOCSTI pushes input into a terminal (typing commands
/// into the operator's shell), TIOCLINUX reaches console selection and input tricks.
// libc's Ioctl type is c_ulong on glibc but c_int on musl; the cast keeps both building.
#[allow(clippy::unnecessary_cast)]
pub const IOCTL_REQUESTS: &[(&str, u64)] = &[
    ("TIOCSTI", libc::TIOCSTI as u64),
    ("TIOCLINUX", libc::TIOCLINUX as u64),
];

/// personality(2) values still allowed: the default and the query. Anything else (e.g.
/// ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC) weakens the process's own hardening.
pub const PERSONALITY_ALLOWED: &[u64] = &[0, 0xffff_ffff];

/// Socket address families a run may create (`socket`, `socketpair`); every other family
/// gets EAFNOSUPPORT, as from a kernel built without it. Unix sockets for local IPC,
/// IPv4/IPv6 for the gateway on loopback (the net namespace has nothing else), netlink for
/// the interface queries libc makes (getaddrinfo, getifaddrs). Refused, among others:
/// AF_VSOCK (the hypervisor and other guests answer on it, outside the net namespace),
/// AF_PACKET, AF_BLUETOOTH, AF_ALG (kernel crypto), AF_KEY, AF_RDS, AF_TIPC, AF_XDP.
/// Within the allowed families, see [`INET_TYPES_ALLOWED`] and [`NETLINK_PROTOCOLS_ALLOWED`].
pub const SOCKET_FAMILIES_ALLOWED: &[(&str, libc::c_int)] = &[
    ("AF_UNIX", libc::AF_UNIX),
    ("AF_INET", libc::AF_INET),
    ("AF_INET6", libc::AF_INET6),
    ("AF_NETLINK", libc::AF_NETLINK),
];

/// IPv4/IPv6 sockets: TCP streams only (type `SOCK_STREAM` with protocol 0 or TCP), the
/// gateway's transport, whose bind and connect Landlock governs. No UDP (Landlock has no
/// UDP rules on the kernels this runs on, so "bind none" could not hold for it), no raw
/// or ping sockets, no SCTP or MPTCP: EPERM.
pub const INET_TYPES_ALLOWED: &[(&str, libc::c_int)] = &[("SOCK_STREAM", libc::SOCK_STREAM)];
pub const INET_PROTOCOLS_ALLOWED: &[(&str, libc::c_int)] =
    &[("default", 0), ("IPPROTO_TCP", libc::IPPROTO_TCP)];

/// Netlink protocols a run may open: NETLINK_ROUTE, this network namespace's own links and
/// addresses (what getifaddrs and getaddrinfo read). Every other gets EPROTONOSUPPORT, as
/// from a kernel without it: NETLINK_KOBJECT_UEVENT would hear every device event of the
/// host (another run's loop devices), audit, sock_diag, netfilter and the rest are not a
/// run's business.
pub const NETLINK_PROTOCOLS_ALLOWED: &[(&str, libc::c_int)] =
    &[("NETLINK_ROUTE", libc::NETLINK_ROUTE)];
