//! Where agent processes are forked, so that they die with tether.
//!
//! On Linux each agent gets the parent-death signal SIGKILL (`PR_SET_PDEATHSIG`). The
//! kernel sends it when the *thread* that forked the child ends, not the process, and
//! tokio's threads come and go (blocking threads idle out, `block_in_place` hands a worker
//! over). So every agent is forked on one thread that lives as long as the process
//! ([`on_spawner_thread`]): the signal fires exactly when tether dies, even by SIGKILL.

use std::sync::OnceLock;
use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

/// The sender to the spawner thread; `None` when the thread could not be started (then
/// agents are forked on the calling thread: they still get stdin EOF and the start-up
/// clean-up, only the parent-death signal may come early).
static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();

fn spawner() -> Option<&'static mpsc::Sender<Job>> {
    SPAWNER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("tether-agent-spawner".to_owned())
                .spawn(move || {
                    // The sender lives in a static: this loop ends only with the process.
                    // A job that panics loses its reply (the caller sees `None`), not
                    // the thread.
                    while let Ok(job) = rx.recv() {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                })
                .map_err(|e| tracing::warn!(error = %e, "cannot start the agent spawner thread"))
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Runs `f` on the spawner thread inside the caller's tokio runtime and returns its
/// result (`f` only forks, so the wait is short); `None` if `f` panicked.
pub(crate) fn on_spawner_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let handle = tokio::runtime::Handle::try_current().ok();
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let job = move || {
        let _entered = handle.as_ref().map(tokio::runtime::Handle::enter);
        let _ = reply_tx.send(f());
    };
    let job: Job = Box::new(job);
    let unsent = match spawner() {
        Some(tx) => tx.send(job).err().map(|mpsc::SendError(job)| job),
        None => Some(job),
    };
    if let Some(job) = unsent {
        job();
    }
    reply_rx.recv().ok()
}

/// Makes the kernel SIGKILL the child when the forking thread (see the module header)
/// ends, and refuses to start it when tether died between fork and exec.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn die_with_parent(cmd: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    let hook = move || -> std::io::Result<()> {
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
        if nix::unistd::getppid() != parent {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only
    // async-signal-safe work is allowed. It makes two system calls (prctl, getppid),
    // touches no lock and allocates nothing (its errors are plain errno values).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// No parent-death signal outside Linux: stdin EOF and the start-up clean-up remain.
#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_parent(_cmd: &mut tokio::process::Command) {}
