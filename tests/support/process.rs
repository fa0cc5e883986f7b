//! A program of this repository (an example) that a test runs as a process of its own, to kill,
//! freeze or stop in the middle of its work: the share workers, the transactional workers and
//! the database members are each one of these. One handle, so that every test kills, thaws,
//! waits for and reports a process the same way (a frozen process is thawed before it is killed;
//! a process still running when its handle drops is killed by its own PID, never by name).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A started process with its output files (`DIR/NAME.out`, `DIR/NAME.err`).
pub struct ChildProcess {
    /// Its name in the test's messages (and its output files' stem).
    pub name: String,
    child: Option<Child>,
    /// Its stdout.
    pub stdout: PathBuf,
    /// Its stderr.
    pub stderr: PathBuf,
    started: Instant,
}

impl ChildProcess {
    /// Starts `command` as `name`: stdin closed, stdout and stderr to `dir/name.out` and
    /// `dir/name.err`.
    pub fn spawn(name: &str, dir: &Path, command: &mut Command) -> ChildProcess {
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.err"));
        let child = command
            .stdin(Stdio::null())
            .stdout(File::create(&stdout).expect("stdout file"))
            .stderr(File::create(&stderr).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("start {name} ({:?}): {e}", command.get_program()));
        ChildProcess {
            name: name.to_string(),
            child: Some(child),
            stdout,
            stderr,
            started: Instant::now(),
        }
    }

    /// Its process id; 0 once it ended and was reaped.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`, `KILL`) with kill(1).
    pub fn signal(&self, signal: &str) {
        let pid = self.pid();
        assert!(pid != 0, "{} ended: no process for SIG{signal}", self.name);
        let status = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// SIGKILL (`Child::kill`), reaped; nothing when it already ended.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let status = child.wait().expect("reap");
            eprintln!(
                "{}: killed after {:?} ({status})",
                self.name,
                self.started.elapsed()
            );
        }
    }

    /// Waits for it to end; `None` past `bound` (it still runs).
    pub fn wait_exit(&mut self, bound: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + bound;
        let child = self.child.as_mut()?;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to `bound` for it to end; true on status 0. Past `bound` it is killed (false).
    pub fn wait(&mut self, bound: Duration) -> bool {
        match self.wait_exit(bound) {
            Some(status) => status.success(),
            None => {
                self.kill();
                false
            }
        }
    }

    /// Stops it gracefully (SIGTERM) and waits up to `bound`; true on status 0.
    pub fn stop(&mut self, bound: Duration) -> bool {
        self.signal("TERM");
        self.wait(bound)
    }

    /// Waits up to `bound` for a clean end with a line that starts with `summary` on its stdout,
    /// and returns that line (the last such); panics with every log of it and of `others`
    /// otherwise.
    pub fn assert_clean_exit(
        &mut self,
        bound: Duration,
        summary: &str,
        others: &[&ChildProcess],
    ) -> String {
        let status = self.wait_exit(bound);
        let stdout = self.output();
        let line = stdout.lines().rev().find(|l| l.starts_with(summary));
        assert!(
            status.is_some_and(|s| s.success()) && line.is_some(),
            "{} did not end cleanly with its {summary:?} line ({status:?})\n{}{}",
            self.name,
            self.logs(),
            logs_of(others)
        );
        let line = line.unwrap_or_default().to_string();
        eprintln!("{}: {line}", self.name);
        line
    }

    /// Its stdout so far.
    pub fn output(&self) -> String {
        fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// The ends of its stdout and stderr, for a failure's message.
    pub fn logs(&self) -> String {
        format!(
            "--- {} stdout ---\n{}\n--- {} stderr ({}) ---\n{}\n",
            self.name,
            file_tail(&self.stdout, 3000),
            self.name,
            self.stderr.display(),
            file_tail(&self.stderr, 12000)
        )
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_ref() {
            // A frozen process must be thawed to die cleanly.
            let _ = Command::new("kill")
                .args(["-CONT".to_string(), child.id().to_string()])
                .status();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The logs of every one of `processes`, for a failure's message.
pub fn logs_of(processes: &[&ChildProcess]) -> String {
    processes.iter().map(|p| p.logs()).collect()
}

/// The last `max` bytes (about) of the file at `path`, or why it could not be read.
pub fn file_tail(path: &Path, max: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()));
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}
